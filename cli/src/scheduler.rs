//! `ferry scheduler`: the placement and orchestration API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use ferry_scheduler::cluster::ClusterConfig;
use ferry_scheduler::node_client::HttpMigrations;
use ferry_scheduler::service::Scheduler;
use ferry_scheduler::store::{FileStore, MemoryStore, Store};
use ferry_sfu::driver::heartbeat::SchedulerLink;
use ferry_sfu::driver::http::limits::{HttpLimits, RateLimit};

/// Options of `ferry scheduler`.
#[derive(clap::Args, Debug)]
pub struct SchedulerArgs {
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub http: SocketAddr,
    /// State file (the embedded store); `none` keeps state in memory only.
    #[arg(long, default_value = "ferry-scheduler.json")]
    pub state_file: Option<PathBuf>,
    /// API bearer token (default: $FERRY_API_TOKEN, else a random one, printed).
    #[arg(long, env = "FERRY_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// How the gateway checks WHIP/WHEP access tokens.
    #[command(flatten)]
    pub tokens: crate::access::TokenKeyArgs,
    /// HTTPS.
    #[command(flatten)]
    pub tls: crate::access::TlsArgs,
    /// The TURN fleet (`POST /v1/turn/credentials`).
    #[command(flatten)]
    pub turn: TurnArgs,
    /// Where the cluster state lives: `embedded` (the state file; one scheduler) or `etcd`
    /// (replicas elect a leader; needs a binary built with `--features etcd`).
    #[arg(long, env = "FERRY_STORE", value_enum, default_value_t = StoreKind::Embedded)]
    pub store: StoreKind,
    /// etcd client URLs, comma-separated (`--store etcd`).
    #[arg(
        long,
        env = "FERRY_ETCD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    pub etcd_endpoints: Vec<String>,
    /// Key prefix of this Ferry cluster in etcd.
    #[arg(long, env = "FERRY_ETCD_PREFIX", default_value = "/ferry")]
    pub etcd_prefix: String,
    /// Leader lease (seconds): a dead leader is replaced within this. The leader steps down
    /// when etcd has not acknowledged a renewal for 3/4 of it, so it must outlast an etcd
    /// leader election (1–3 s with etcd's defaults).
    #[arg(long, env = "FERRY_LEASE_TTL", default_value_t = 5)]
    pub lease_ttl_s: u64,
    /// This replica's base URL as other replicas and nodes reach it (followers redirect
    /// writes to the leader's); default `http://` + the listen address.
    #[arg(long, env = "FERRY_ADVERTISE")]
    pub advertise: Option<String>,
    /// Hot streams: once a stream's publisher's node serves this many of its viewers, further
    /// viewers go to other nodes (relayed from it). 0: all on the publisher's node.
    #[arg(long, env = "FERRY_HOT_STREAM_VIEWERS", default_value_t = 0)]
    pub hot_stream_viewers: u64,
    /// The HTTP listener's limits per client address, as a node's (requests with the API
    /// token, the nodes' and the operator's, are not limited).
    #[command(flatten)]
    pub http_limit: crate::access::HttpLimitArgs,
}

impl SchedulerArgs {
    /// The cluster core's settings these flags give.
    fn cluster_config(&self) -> ClusterConfig {
        ClusterConfig {
            hot_stream_viewers: self.hot_stream_viewers,
            ..ClusterConfig::default()
        }
    }
}

/// Where the scheduler keeps the cluster state.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// A local file (or memory): a single scheduler.
    Embedded,
    /// etcd: replicated schedulers with leader election and fenced writes.
    Etcd,
}

/// A started scheduler.
pub struct RunningScheduler {
    pub scheduler: Arc<Scheduler>,
    /// Base URL: `http://` or, with TLS, `https://` and the address.
    pub url: String,
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Whether no token key was given (WHIP/WHEP then take the API token only).
    pub generated_secret: bool,
}

/// `$FERRY_API_TOKEN`, else 32 random hex digits.
pub fn token_from_env_or_random() -> String {
    std::env::var("FERRY_API_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| {
            use rand::RngExt;
            let b: [u8; 16] = rand::rng().random();
            b.iter().map(|x| format!("{x:02x}")).collect()
        })
}

/// The TURN relays the scheduler hands out (stock coturn with `use-auth-secret`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TurnArgs {
    /// Relays, comma-separated: `turn:HOST:PORT[?transport=udp|tcp]` or `turns:…`, each with
    /// optional `;zone=Z;isp=I;weight=W`. Without, no TURN.
    #[arg(long, env = "FERRY_TURN_URIS", default_value = "")]
    pub turn_uris: String,
    /// coturn's `static-auth-secret`, comma-separated newest first during a rotation.
    #[arg(long, env = "FERRY_TURN_SECRET", hide_env_values = true)]
    pub turn_secret: Option<String>,
    /// Lifetime of a credential, seconds.
    #[arg(long, env = "FERRY_TURN_TTL", default_value_t = 3600)]
    pub turn_ttl_s: u64,
    /// Seconds between STUN health probes of each relay (3 missed in a row: handed to nobody
    /// until it answers again); 0 turns the probes off.
    #[arg(long, env = "FERRY_TURN_PROBE_INTERVAL", default_value_t = 2)]
    pub turn_probe_interval_s: u64,
}

impl TurnArgs {
    /// The fleet, when relays are configured.
    pub fn fleet(&self) -> anyhow::Result<Option<ferry_scheduler::turn::TurnFleet>> {
        let servers = ferry_proto::turn::parse_uris(&self.turn_uris)?;
        if servers.is_empty() {
            return Ok(None);
        }
        let secret = self.turn_secret.as_deref().context(
            "--turn-uris needs --turn-secret (or $FERRY_TURN_SECRET): coturn's static-auth-secret",
        )?;
        let fleet = ferry_scheduler::turn::TurnFleet::new(ferry_scheduler::turn::TurnConfig {
            secrets: ferry_proto::turn::parse_secrets(secret)?,
            servers,
            ttl: std::time::Duration::from_secs(self.turn_ttl_s),
        })?;
        Ok(Some(fleet))
    }
}

/// How a node started by this binary reports to the scheduler replicas at `urls`
/// (comma-separated).
pub fn link(urls: &str, token: &str, host: &str) -> SchedulerLink {
    let mut l = SchedulerLink::new(urls, token);
    l.host = host.to_owned();
    l.capabilities = vec!["h264".into(), "vp8".into(), "opus".into()];
    l
}

/// `app` with every request but the API token's counted against its client address's
/// `limit` (429 with Retry-After past it), and the refusals appended to `/metrics`
/// (`ferry_http_rate_limited_total`).
fn with_limits(app: Router, limit: RateLimit, token: &str) -> Router {
    let api = ferry_proto::auth::Verifier::operator_only().with_operator_token(token);
    let limits = HttpLimits::new(limit).trusting(move |bearer| api.is_operator_token(bearer));
    let counted = limits.clone();
    limits.apply(app).layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let limits = counted.clone();
            async move {
                let metrics = req.uri().path() == "/metrics";
                let response = next.run(req).await;
                if !metrics || !response.status().is_success() {
                    return response;
                }
                let (parts, body) = response.into_parts();
                match axum::body::to_bytes(body, usize::MAX).await {
                    Ok(text) => {
                        let mut text = text.to_vec();
                        text.extend_from_slice(limits.metrics_text().as_bytes());
                        axum::response::Response::from_parts(parts, axum::body::Body::from(text))
                    }
                    Err(_) => {
                        axum::response::Response::from_parts(parts, axum::body::Body::empty())
                    }
                }
            }
        },
    ))
}

pub async fn start_scheduler(
    args: SchedulerArgs,
    extra: Option<Router<Arc<Scheduler>>>,
) -> anyhow::Result<RunningScheduler> {
    let token = args.token.clone().unwrap_or_else(token_from_env_or_random);
    let turn = args.turn.fleet().context("the TURN settings")?;
    let listener = tokio::net::TcpListener::bind(args.http)
        .await
        .with_context(|| format!("binding {}", args.http))?;
    let addr = listener.local_addr()?;
    // Nodes accept migration orders with the same token they heartbeat with.
    let migrations = Arc::new(HttpMigrations::new(&token).with_tls(args.tls.client()?));
    let scheduler = match args.store {
        StoreKind::Embedded => {
            let store: Box<dyn Store<ferry_scheduler::cluster::Persisted>> = match &args.state_file
            {
                Some(p) if p.as_os_str() != "none" => Box::new(FileStore::new(p.clone())),
                _ => Box::new(MemoryStore::default()),
            };
            let s = Scheduler::open(args.cluster_config(), store, token, migrations)
                .context("opening the scheduler state")?;
            // The rooms' snapshots beside the state file (scheduler.json -> scheduler.rooms/).
            if let Some(p) = args.state_file.as_ref().filter(|p| p.as_os_str() != "none") {
                s.set_room_snapshots(Arc::new(
                    ferry_scheduler::room_snapshots::DirSnapshots::new(p.with_extension("rooms")),
                ));
            }
            s
        }
        StoreKind::Etcd => open_etcd(&args, addr, token, migrations).await?,
    };
    if let Some(fleet) = turn {
        scheduler.set_turn(fleet);
        if args.turn.turn_probe_interval_s > 0 {
            tokio::spawn(ferry_scheduler::turn_probe::run(
                scheduler.clone(),
                std::time::Duration::from_secs(args.turn.turn_probe_interval_s),
                3,
            ));
        }
        // Drains of relays end when they hold no allocations or at their deadline.
        let s = scheduler.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                s.check_turn_drains();
            }
        });
    }
    tokio::spawn(scheduler.clone().run());
    let keys = args.tokens.keys()?;
    let server_tls = args.tls.server()?;
    scheduler.set_node_tls(args.tls.client()?);
    let app = ferry_scheduler::api::router_with_tokens(
        scheduler.clone(),
        extra,
        keys.verifier,
        // A made-up secret is this process's alone: the nodes could not check what it signs.
        keys.signer.filter(|_| !keys.generated),
    );
    let app = with_limits(app, args.http_limit.limit(), scheduler.token());
    let url = format!(
        "{}://{addr}",
        ferry_sfu::driver::tls::scheme(server_tls.is_some())
    );
    let server = tokio::spawn(ferry_sfu::driver::tls::serve(listener, server_tls, app));
    Ok(RunningScheduler {
        scheduler,
        url,
        server,
        generated_secret: keys.generated,
    })
}

/// A scheduler replica on etcd.
#[cfg(feature = "etcd")]
async fn open_etcd(
    args: &SchedulerArgs,
    addr: SocketAddr,
    token: String,
    migrations: Arc<HttpMigrations>,
) -> anyhow::Result<Arc<Scheduler>> {
    use ferry_scheduler::ha::{EtcdConfig, EtcdStore};
    let advertise = match &args.advertise {
        Some(a) => a.trim_end_matches('/').to_owned(),
        None if addr.ip().is_unspecified() => anyhow::bail!(
            "--advertise is needed with --store etcd when listening on {addr} (followers redirect to it)"
        ),
        None => format!("http://{addr}"),
    };
    anyhow::ensure!(args.lease_ttl_s >= 1, "--lease-ttl-s must be at least 1");
    let cluster = args.cluster_config();
    let cfg = EtcdConfig {
        endpoints: args.etcd_endpoints.clone(),
        prefix: args.etcd_prefix.trim_end_matches('/').to_owned(),
        lease_ttl: std::time::Duration::from_secs(args.lease_ttl_s),
        advertise,
        // A node is down after the heartbeats it may miss.
        node_lease_ttl: cluster.heartbeat_interval * cluster.missed_heartbeats,
    };
    let endpoints = cfg.endpoints.join(",");
    let (store, leadership) = tokio::task::spawn_blocking(move || EtcdStore::connect(cfg))
        .await?
        .with_context(|| format!("connecting to etcd at {endpoints}"))?;
    let leases = store.node_leases();
    let snapshots = store.room_snapshots();
    let s = Scheduler::open_replica(
        cluster,
        Box::new(store),
        token,
        migrations,
        leadership,
        Some(leases),
    )
    .context("opening the scheduler state from etcd")?;
    s.set_room_snapshots(Arc::new(snapshots));
    Ok(s)
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(
    _: &SchedulerArgs,
    _: SocketAddr,
    _: String,
    _: Arc<HttpMigrations>,
) -> anyhow::Result<Arc<Scheduler>> {
    anyhow::bail!(
        "--store etcd needs a ferry binary built with etcd support: cargo build --release -p ferry --features etcd"
    )
}

pub async fn run(args: SchedulerArgs) -> anyhow::Result<()> {
    let printed_token = args.token.is_none();
    let s = start_scheduler(args, Some(crate::sdk_files::routes())).await?;
    println!("scheduler http {}", s.url);
    if printed_token {
        println!("  API token {}", s.scheduler.token());
    }
    if s.generated_secret {
        println!(
            "  no --token-secret/$FERRY_TOKEN_SECRET/--token-public-key: WHIP/WHEP accept the API token only"
        );
    }
    tokio::select! {
        r = s.server => r.context("scheduler")??,
        _ = tokio::signal::ctrl_c() => println!("shutting down"),
    }
    s.scheduler.flush().context("saving scheduler state")?;
    Ok(())
}
