//! `ferry scheduler`: the placement and orchestration API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use ferry_scheduler::cluster::ClusterConfig;
use ferry_scheduler::node_client::HttpMigrations;
use ferry_scheduler::service::Scheduler;
use ferry_scheduler::store::{FileStore, MemoryStore, Store};
use ferry_sfu::heartbeat::SchedulerLink;

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
}

/// A started scheduler.
pub struct RunningScheduler {
    pub scheduler: Arc<Scheduler>,
    pub addr: SocketAddr,
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
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

/// How a node started by this binary reports to the scheduler at `url`.
pub fn link(url: &str, token: &str, host: &str) -> SchedulerLink {
    SchedulerLink {
        url: url.to_owned(),
        token: token.to_owned(),
        zone: "default".into(),
        host: host.to_owned(),
        region: String::new(),
        capabilities: vec!["h264".into(), "vp8".into(), "opus".into()],
        canary: false,
        gpu: None,
        gpu_reader: None,
        bandwidth_capacity_bps: 0,
        interval: Duration::from_secs(1),
    }
}

pub async fn start_scheduler(
    args: SchedulerArgs,
    extra: Option<Router<Arc<Scheduler>>>,
) -> anyhow::Result<RunningScheduler> {
    let token = args.token.unwrap_or_else(token_from_env_or_random);
    let store: Box<dyn Store<ferry_scheduler::cluster::Persisted>> = match args.state_file {
        Some(p) if p.as_os_str() != "none" => Box::new(FileStore::new(p)),
        _ => Box::new(MemoryStore::default()),
    };
    // Nodes accept migration orders with the same token they heartbeat with.
    let migrations = Arc::new(HttpMigrations::new(&token));
    let scheduler = Scheduler::open(ClusterConfig::default(), store, token, migrations)
        .context("opening the scheduler state")?;
    tokio::spawn(scheduler.clone().run());
    let listener = tokio::net::TcpListener::bind(args.http)
        .await
        .with_context(|| format!("binding {}", args.http))?;
    let addr = listener.local_addr()?;
    let app = ferry_scheduler::api::router(scheduler.clone(), extra);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(RunningScheduler {
        scheduler,
        addr,
        server,
    })
}

pub async fn run(args: SchedulerArgs) -> anyhow::Result<()> {
    let printed_token = args.token.is_none();
    let s = start_scheduler(args, Some(crate::sdk_files::routes())).await?;
    println!("scheduler http http://{}", s.addr);
    if printed_token {
        println!("  API token {}", s.scheduler.token());
    }
    tokio::select! {
        r = s.server => r.context("scheduler")??,
        _ = tokio::signal::ctrl_c() => println!("shutting down"),
    }
    s.scheduler.flush().context("saving scheduler state")?;
    Ok(())
}
