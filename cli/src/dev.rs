//! `ferry dev`: everything on loopback with embedded defaults. The gateway
//! on :8080 serves the demo page and redirects WHIP/WHEP (307) to the node
//! that serves the stream; with one node that is always `node-a`.

use std::net::SocketAddr;

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use ferry_proto::NodeId;
use ferry_sfu::driver::{self, NodeHandle, NodeOptions};
use serde::Serialize;
use tower_http::cors::{Any, CorsLayer};

const DEMO: &str = include_str!("demo/index.html");

/// Options of `ferry dev`.
#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Gateway (demo page, API) address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    gateway: SocketAddr,
    /// HTTP address of node-a.
    #[arg(long, default_value = "127.0.0.1:8081")]
    node_a: SocketAddr,
    /// Media UDP address of node-a (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    node_a_udp: SocketAddr,
}

#[derive(Clone)]
struct Gateway {
    node: NodeHandle,
    node_id: NodeId,
    node_http: SocketAddr,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let node_id = NodeId::new("node-a").context("node id")?;
    let node = driver::start(NodeOptions {
        id: node_id.clone(),
        http: args.node_a,
        udp: args.node_a_udp,
        announce: None,
        ice_servers: Vec::new(),
        nack_cache: 1000,
        max_sessions: 2000,
        process_metrics: Some(crate::alloc::prometheus),
    })
    .await
    .context("starting node-a")?;
    let gw = Gateway {
        node: node.handle.clone(),
        node_id,
        node_http: node.http,
    };
    let listener = tokio::net::TcpListener::bind(args.gateway)
        .await
        .with_context(|| format!("binding gateway {}", args.gateway))?;
    let gateway_addr = listener.local_addr()?;
    // First line: machine-readable addresses (tests and scripts read it).
    println!(
        "ferry dev gateway http://{gateway_addr} node-a http://{} udp {}",
        node.http, node.candidate
    );
    println!("  demo page + API   http://{gateway_addr}/");
    println!(
        "  node-a            http://{}  media udp {}",
        node.http, node.candidate
    );
    println!("  publish           POST http://{gateway_addr}/whip/{{stream}}  (307 to node-a)");
    println!("  play              POST http://{gateway_addr}/whep/{{stream}}  (307 to node-a)");
    let app = router(gw);
    tokio::select! {
        r = axum::serve(listener, app) => r.context("gateway")?,
        r = node.server => r.context("node-a http")?.context("node-a http")?,
        _ = tokio::signal::ctrl_c() => println!("shutting down"),
    }
    Ok(())
}

fn router(gw: Gateway) -> Router {
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods(Any)
        .allow_headers(Any)
        .expose_headers([header::LOCATION, header::ETAG, header::LINK]);
    Router::new()
        .route("/", get(|| async { Html(DEMO) }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/whip/{stream}", post(redirect_whip))
        .route("/whep/{stream}", post(redirect_whep))
        .route("/v1/sessions", get(sessions))
        .route("/v1/nodes", get(nodes))
        .layer(cors)
        .with_state(gw)
}

fn redirect(gw: &Gateway, kind: &str, stream: &str) -> Response {
    let target = format!("http://{}/{kind}/{stream}", gw.node_http);
    let mut r = StatusCode::TEMPORARY_REDIRECT.into_response();
    if let Ok(v) = HeaderValue::from_str(&target) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

async fn redirect_whip(State(gw): State<Gateway>, Path(stream): Path<String>) -> Response {
    redirect(&gw, "whip", &stream)
}

async fn redirect_whep(State(gw): State<Gateway>, Path(stream): Path<String>) -> Response {
    redirect(&gw, "whep", &stream)
}

#[derive(Serialize)]
struct SessionRow {
    #[serde(flatten)]
    info: ferry_sfu::signal::SessionInfo,
    node: NodeId,
}

async fn sessions(State(gw): State<Gateway>) -> Response {
    match gw.node.sessions().await {
        Ok(list) => axum::Json(
            list.into_iter()
                .map(|info| SessionRow {
                    info,
                    node: gw.node_id.clone(),
                })
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

#[derive(Serialize)]
struct NodeRow {
    id: NodeId,
    state: &'static str,
    weight: f64,
    sessions: usize,
    http: String,
}

async fn nodes(State(gw): State<Gateway>) -> Response {
    let sessions = gw.node.sessions().await.map(|l| l.len()).unwrap_or(0);
    axum::Json(vec![NodeRow {
        id: gw.node_id.clone(),
        state: "active",
        weight: 1.0,
        sessions,
        http: format!("http://{}", gw.node_http),
    }])
    .into_response()
}
