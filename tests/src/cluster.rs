//! Talking to a running cluster from a test: the scheduler's API for nodes,
//! sessions, migrations and TURN relays, and what the pages report about sessions.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::collector::num;
use crate::coturn::Coturn;
use crate::node::{FerryProcess, http};
use crate::{Browser, Collector};

/// Opens `publish.html` as page `id`, publishing `codec` video and audio to
/// the WHIP endpoint `whip` (`extra` query pairs appended), and waits until
/// it is connected and encoding.
pub async fn open_publisher(
    collector: &Collector,
    whip: &str,
    codec: &str,
    id: &str,
    extra: &[(&str, &str)],
    setup: Duration,
) -> Result<Browser> {
    let mut query = vec![("whip", whip), ("codec", codec), ("audio", "1"), ("id", id)];
    query.extend_from_slice(extra);
    let page = Browser::open(&collector.page_url("publish.html", &query))?;
    collector
        .wait_until(setup, |r| {
            r.get(id).is_some_and(|a| {
                a["connectionState"] == "connected" && num(a, "/outbound/video/framesEncoded") > 0.0
            })
        })
        .await?;
    Ok(page)
}

/// Opens the browser SDK's `page` (`sdk-publish.html` or `sdk-play.html`) as page `id` on
/// `stream` of `dev`: VP8, through its gateway, with its API token, `extra` query pairs appended.
pub fn open_sdk_page(
    collector: &Collector,
    dev: &Dev,
    page: &str,
    stream: &str,
    id: &str,
    extra: &[(&str, &str)],
) -> Result<Browser> {
    let mut query = vec![
        ("sdk", dev.gateway.as_str()),
        ("base", dev.gateway.as_str()),
        ("stream", stream),
        ("codec", "vp8"),
        ("id", id),
        ("token", dev.token.as_str()),
    ];
    query.extend_from_slice(extra);
    Browser::open(&collector.page_url(page, &query))
}

/// [`open_sdk_page`] with `sdk-publish.html`, once the SDK says it is publishing.
pub async fn open_sdk_publisher(
    collector: &Collector,
    dev: &Dev,
    stream: &str,
    id: &str,
    extra: &[(&str, &str)],
    setup: Duration,
) -> Result<Browser> {
    let page = open_sdk_page(collector, dev, "sdk-publish.html", stream, id, extra)?;
    collector
        .wait_until(setup, |r| {
            r.get(id).is_some_and(|a| a["phase"] == "publishing")
        })
        .await?;
    Ok(page)
}

/// The session id at the end of a page's WHIP/WHEP `Location`.
pub fn session_of(report: &Value) -> Result<String> {
    let loc = report["whip"]["location"]
        .as_str()
        .or_else(|| report["whep"]["location"].as_str())
        .context("no Location in the report")?;
    Ok(loc.rsplit('/').next().unwrap_or_default().to_owned())
}

/// A viewer page is connected and has decoded video.
pub fn playing(report: &Value) -> bool {
    report["connectionState"] == "connected" && num(report, "/inbound/video/framesDecoded") > 0.0
}

/// Waits until `n` nodes are active at the scheduler `gateway`, each with a
/// migration address.
pub async fn wait_registered(gateway: &str, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = http(&format!("{gateway}/v1/nodes"), "GET", &[], b"")?;
        let nodes: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if nodes.as_array().is_some_and(|l| {
            l.len() == n
                && l.iter().all(|x| {
                    x["state"] == "active" && x["migration"].as_str().is_some_and(|m| !m.is_empty())
                })
        }) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "nodes did not register: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `POST /v1/migrations`; the migration's id.
pub fn start_migration(
    gateway: &str,
    token: &str,
    session: &str,
    target: &str,
    mode: &str,
) -> Result<String> {
    let auth = format!("Bearer {token}");
    let body = serde_json::json!({ "session": session, "target": target, "mode": mode });
    let r = http(
        &format!("{gateway}/v1/migrations"),
        "POST",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )?;
    ensure!(
        (200..300).contains(&r.status),
        "POST /v1/migrations: {} {}",
        r.status,
        r.body
    );
    Ok(serde_json::from_str::<Value>(&r.body)?["id"]
        .as_str()
        .context("migration id")?
        .to_owned())
}

/// Follows migration `id` until it ends (committed, rolled back or failed);
/// its final view.
pub async fn migration_end(gateway: &str, id: &str) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http(&format!("{gateway}/v1/migrations/{id}"), "GET", &[], b"")?;
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if matches!(
            v["state"].as_str(),
            Some("committed" | "rolled_back" | "failed")
        ) {
            return Ok(v);
        }
        ensure!(
            Instant::now() < deadline,
            "migration {id} did not end: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the scheduler sees `session` on `node` (heartbeats follow a
/// cutover within a second).
pub async fn wait_session_on(gateway: &str, session: &str, node: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = http(&format!("{gateway}/v1/sessions"), "GET", &[], b"")?;
        let list: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if list
            .as_array()
            .is_some_and(|l| l.iter().any(|s| s["id"] == session && s["node"] == node))
        {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{session} not on {node}: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (up to `within`) until the scheduler's view of recording `id` satisfies `ok`; that
/// view.
pub async fn recording_until(
    gateway: &str,
    id: &str,
    within: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Result<Value> {
    task_until(gateway, "recordings", id, within, ok).await
}

/// Waits (up to `within`) until the scheduler's view of task `id` — `GET
/// /v1/{kind}/{id}`, `kind` `recordings` or `transcodes` — satisfies `ok`; that view.
pub async fn task_until(
    gateway: &str,
    kind: &str,
    id: &str,
    within: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let deadline = Instant::now() + within;
    loop {
        let r = http(&format!("{gateway}/v1/{kind}/{id}"), "GET", &[], b"")?;
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if ok(&v) {
            return Ok(v);
        }
        ensure!(
            Instant::now() < deadline,
            "{kind} {id}: {} {}",
            r.status,
            r.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The id the scheduler `gateway` gives the TURN relay `uri` (`GET /v1/turn/relays`).
pub fn relay_id(gateway: &str, uri: &str) -> Result<String> {
    let list = http(&format!("{gateway}/v1/turn/relays"), "GET", &[], b"")?;
    ensure!(list.status == 200, "{} {}", list.status, list.body);
    let list: Value = serde_json::from_str(&list.body)?;
    Ok(list
        .as_array()
        .and_then(|a| a.iter().find(|r| r["uri"] == uri))
        .and_then(|r| r["id"].as_str())
        .with_context(|| format!("{uri} not listed: {list}"))?
        .to_owned())
}

/// Drains the TURN relay `id` at the scheduler `gateway` with the API `token`, its users moved
/// off within `deadline_s` (`POST /v1/turn/relays/{id}/drain`, 202).
pub fn drain_relay(gateway: &str, token: &str, id: &str, deadline_s: u64) -> Result<()> {
    let auth = format!("Bearer {token}");
    let r = http(
        &format!("{gateway}/v1/turn/relays/{id}/drain"),
        "POST",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        serde_json::json!({ "deadline_s": deadline_s })
            .to_string()
            .as_bytes(),
    )?;
    ensure!(r.status == 202, "drain: {} {}", r.status, r.body);
    Ok(())
}

/// `ferry dev` as a process: scheduler + edge (unless `--no-edge`) + node-a + node-b, its
/// own state and secrets directory (removed on drop).
#[derive(Debug)]
pub struct Dev {
    /// The process.
    pub _process: FerryProcess,
    /// Its state directory (cluster secrets in `cluster/`).
    pub state: std::path::PathBuf,
    /// Scheduler base URL.
    pub gateway: String,
    /// API token.
    pub token: String,
    /// node-a's base URL.
    pub node_a: String,
    /// node-b's base URL.
    pub node_b: String,
    /// How it was started (for [`Dev::restart`]).
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Dev {
    /// SIGKILLs the whole cluster (scheduler, edge, both nodes: one process) and starts it
    /// again on the same state directory (new ports, the same node ids), as after a crash of
    /// every machine.
    pub fn restart(&mut self) -> Result<()> {
        self._process.kill();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let process = FerryProcess::spawn_env(&args, &env)?;
        self.gateway = process.after("gateway")?;
        self.token = process.after("token")?;
        self.node_a = process.after("node-a")?;
        self.node_b = process.after("node-b")?;
        self._process = process;
        Ok(())
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// Starts `ferry dev` on free ports, through the edge or (`edge` false) not.
pub fn start_dev(edge: bool) -> Result<Dev> {
    start_dev_with(edge, &[])
}

/// [`start_dev`] with `extra` arguments (`--store etcd --etcd-endpoints …`).
pub fn start_dev_with(edge: bool, extra: &[&str]) -> Result<Dev> {
    start_dev_env(edge, extra, &[])
}

/// [`start_dev_with`] with `env` added to the process's environment.
pub fn start_dev_env(edge: bool, extra: &[&str], env: &[(&str, &str)]) -> Result<Dev> {
    start_dev_at("127.0.0.1", edge, extra, env)
}

/// [`start_dev_env`] without the edge, once both nodes are registered.
pub async fn start_dev_registered(extra: &[&str], env: &[(&str, &str)]) -> Result<Dev> {
    let dev = start_dev_env(false, extra, env)?;
    wait_registered(&dev.gateway, 2).await?;
    Ok(dev)
}

/// [`start_dev_registered`] with `relays` as its TURN fleet, the gateway signing credentials
/// with their `secret` (`FERRY_TURN_URIS`, `FERRY_TURN_SECRET`).
pub async fn start_dev_with_relays(relays: &[Coturn], secret: &str) -> Result<Dev> {
    let uris: Vec<String> = relays.iter().map(Coturn::uri).collect();
    start_dev_registered(
        &[],
        &[
            ("FERRY_TURN_URIS", &uris.join(",")),
            ("FERRY_TURN_SECRET", secret),
        ],
    )
    .await
}

/// [`start_dev_env`] with every socket (HTTP, edge, media, migrations) on `ip`: an address
/// other than loopback, for peers in a network namespace ([`crate::netns::Netns`]).
pub fn start_dev_at(ip: &str, edge: bool, extra: &[&str], env: &[(&str, &str)]) -> Result<Dev> {
    // Each run its own state and secrets: runs of this file go in parallel.
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let state = std::env::temp_dir().join(format!(
        "ferry-dev-test-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let state_arg = state.to_str().context("temp dir")?.to_owned();
    let any = format!("{ip}:0");
    let mut args = vec![
        "dev",
        "--state-dir",
        state_arg.as_str(),
        "--gateway",
        &any,
        "--node-a",
        &any,
        "--node-b",
        &any,
        "--edge",
        &any,
    ];
    if ip != "127.0.0.1" {
        args.extend(["--udp", &any]);
    }
    if !edge {
        args.push("--no-edge");
    }
    args.extend_from_slice(extra);
    let process = FerryProcess::spawn_env(&args, env)?;
    Ok(Dev {
        state,
        gateway: process.after("gateway")?,
        token: process.after("token")?,
        node_a: process.after("node-a")?,
        node_b: process.after("node-b")?,
        _process: process,
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    })
}

/// A cluster of separate processes — `ferry scheduler`, `ferry edge`, two `ferry node`s
/// sharing one cluster secrets directory — so a test can kill one of them.
#[derive(Debug)]
pub struct Cluster {
    /// `ferry scheduler`.
    pub _scheduler: FerryProcess,
    /// `ferry edge`.
    pub _edge: FerryProcess,
    /// The edge's HTTP base URL (`/metrics`).
    pub edge_http: String,
    /// node-a's process.
    pub a: FerryProcess,
    /// node-b's process.
    pub b: FerryProcess,
    /// Scheduler base URL.
    pub gateway: String,
    /// API token.
    pub token: String,
    /// node-a's base URL.
    pub node_a: String,
    /// node-b's base URL.
    pub node_b: String,
    /// State and secrets directory (removed on drop).
    pub dir: std::path::PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `ferry scheduler` alone on a free port, its state in memory, with `args` and `env`.
pub fn start_scheduler(args: &[&str], env: &[(&str, &str)]) -> Result<FerryProcess> {
    let mut all = vec!["scheduler", "--http", "127.0.0.1:0", "--state-file", "none"];
    all.extend_from_slice(args);
    FerryProcess::spawn_env(&all, env)
}

/// `ferry edge` on free ports with the cluster secrets in `cluster_dir`: the process, its UDP
/// address and its HTTP base URL (`/metrics`).
pub fn start_edge(cluster_dir: &str) -> Result<(FerryProcess, String, String)> {
    let edge = FerryProcess::spawn(&[
        "edge",
        "--udp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--cluster-dir",
        cluster_dir,
    ])?;
    let udp = edge.after("udp")?;
    let http = format!("http://{}", edge.after("http")?);
    Ok((edge, udp, http))
}

/// Starts the processes; `name` keeps concurrent clusters' directories apart.
pub fn start_cluster(name: &str) -> Result<Cluster> {
    start_cluster_with(name, &[], &[])
}

/// [`start_cluster`] with more arguments for node-a's and node-b's `ferry node` (GPU figures,
/// say).
pub fn start_cluster_with(name: &str, a_args: &[&str], b_args: &[&str]) -> Result<Cluster> {
    let dir = std::env::temp_dir().join(format!("ferry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let token = format!("t{:x}", std::process::id() as u64 * 7919 + 17);
    let d = dir.to_str().context("temp dir")?;
    let state = format!("{d}/scheduler.json");
    let scheduler = FerryProcess::spawn(&[
        "scheduler",
        "--http",
        "127.0.0.1:0",
        "--state-file",
        &state,
        "--token",
        &token,
    ])?;
    let gateway = scheduler.after("http")?;
    let (edge, edge_udp, edge_http) = start_edge(d)?;
    let node = |id: &str, extra: &[&str]| {
        let mut args = vec![
            "node",
            "--id",
            id,
            "--http",
            "127.0.0.1:0",
            "--udp",
            "127.0.0.1:0",
            "--scheduler",
            &gateway,
            "--token",
            &token,
            "--cluster-dir",
            d,
            "--edge",
            &edge_udp,
        ];
        args.extend_from_slice(extra);
        FerryProcess::spawn(&args)
    };
    let a = node("node-a", a_args)?;
    let b = node("node-b", b_args)?;
    Ok(Cluster {
        node_a: a.after("http")?,
        node_b: b.after("http")?,
        _scheduler: scheduler,
        _edge: edge,
        edge_http,
        a,
        b,
        gateway,
        token,
        dir,
    })
}

/// `POST {base}/v1/rooms/{room}/join` for `participant` (the scheduler places it; a node answers
/// with itself): the answer (`node`, `http`, `ws`).
pub fn room_join(base: &str, token: &str, room: &str, participant: &str) -> Result<Value> {
    let r = http(
        &format!("{base}/v1/rooms/{room}/join"),
        "POST",
        &[
            ("authorization", &format!("Bearer {token}")),
            ("content-type", "application/json"),
        ],
        serde_json::json!({"participant": participant})
            .to_string()
            .as_bytes(),
    )?;
    ensure!(
        r.status == 200,
        "join {participant}: {} {}",
        r.status,
        r.body
    );
    Ok(serde_json::from_str(&r.body)?)
}

/// `POST {path}` at the scheduler with `body`, again while it answers 404 (for up to 10 s: the
/// scheduler knows a stream once its node's heartbeat reports the publisher); the last answer.
pub async fn post_once_known(
    gateway: &str,
    token: &str,
    path: &str,
    body: &Value,
) -> Result<(u16, Value)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, v) = crate::api_call(gateway, token, "POST", path, body)?;
        if status != 404 || Instant::now() >= deadline {
            return Ok((status, v));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
