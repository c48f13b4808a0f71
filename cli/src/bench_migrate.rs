//! `ferry bench migrate` and `ferry bench drain`: live migration end to end.
//!
//! A real cluster is started as separate processes — `ferry scheduler`,
//! `ferry edge`, `ferry node` ×2 sharing one secrets directory — and
//! synthetic WebRTC peers (ICE, DTLS, SRTP, NACK: the test peer of
//! `ferry_sfu::peer`) publish and play through the edge over loopback.
//!
//! `migrate`: one publisher and N viewers on node-a; all N viewers are
//! moved to node-b at once through `POST /v1/migrations`. Per viewer, the
//! blackout is the largest gap in video packet arrival during the
//! migration window minus the normal gap (the mean packet interval of a
//! window without migration); total time is POST to committed; snapshot
//! and WAL bytes come from node-a's `ferry_migration_bytes_total`.
//!
//! `drain`: N viewers on node-a (publisher on node-b, relayed), then
//! `POST /v1/nodes/node-a/drain`: time until node-a is drained and the
//! packets every viewer lost after repair (must be 0).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_sfu::codec::Codec;
use ferry_sfu::peer::PeerStats;
use serde::Serialize;
use serde_json::Value;

use crate::bench::{ChildProc, Clocks, wait_for};
use crate::bench_peer::{self, SdkPeer};

/// Options of `ferry bench migrate`.
#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// Session counts to measure (each run moves that many viewers at once).
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    sessions: Vec<usize>,
    /// Cutover mode.
    #[arg(long, default_value = "edge")]
    mode: String,
    /// Migrations in flight at once (the scheduler's drain budget uses 16).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Publisher video bitrate in bit/s.
    #[arg(long, default_value_t = 1_000_000)]
    bitrate: u32,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/migrate.json")]
    out: PathBuf,
}

/// Options of `ferry bench drain`.
#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// Sessions on the drained node.
    #[arg(long, default_value_t = 500)]
    sessions: usize,
    /// Publisher video bitrate in bit/s.
    #[arg(long, default_value_t = 300_000)]
    bitrate: u32,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/drain.json")]
    out: PathBuf,
}

/// A cluster of separate processes on loopback.
pub(crate) struct Cluster {
    /// The scheduler replicas (one with the embedded store; `None` once killed).
    schedulers: Vec<Option<ChildProc>>,
    /// Their base URLs, in start order.
    pub(crate) scheduler_urls: Vec<String>,
    _edge: Option<ChildProc>,
    /// node-a, node-b, … (`None` while killed).
    nodes: Vec<Option<ChildProc>>,
    /// Their command lines, to start them again.
    node_args: Vec<Vec<String>>,
    pub(crate) gateway: String,
    /// The API token (also the bench peers' WHIP/WHEP credential).
    pub(crate) token: String,
    pub(crate) node_http: Vec<String>,
    dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Node ids of a bench cluster, in start order.
pub(crate) const NODE_IDS: [&str; 3] = ["node-a", "node-b", "node-c"];

/// The key prefix of the bench's scheduler replicas in etcd.
pub(crate) fn bench_etcd_prefix() -> String {
    format!("/ferry-bench/{}", std::process::id())
}

/// Scheduler replicas on etcd for a bench cluster.
#[derive(Debug, Clone)]
pub(crate) struct HaSchedulers {
    /// etcd client URLs, comma-separated.
    pub(crate) etcd_endpoints: String,
    /// The replicas' leader lease.
    pub(crate) lease_ttl_s: u64,
}

/// The body of a GET of `url` that answered within a second, whatever its status.
pub(crate) fn get_text(url: &str) -> Option<String> {
    ureq::get(url)
        .config()
        .timeout_global(Some(Duration::from_secs(1)))
        .build()
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
}

/// Whether the scheduler replica at `url` says it leads (`/readyz`).
pub(crate) async fn leads(url: &str) -> bool {
    let url = format!("{url}/readyz");
    tokio::task::spawn_blocking(move || get_text(&url).is_some_and(|b| b.starts_with("ok leader")))
        .await
        .unwrap_or(false)
}

pub(crate) fn get_json(url: &str) -> Result<Value> {
    let mut r = ureq::get(url)
        .call()
        .with_context(|| format!("GET {url}"))?;
    Ok(r.body_mut().read_json()?)
}

pub(crate) fn post_json(url: &str, token: &str, body: &Value) -> Result<Value> {
    let mut r = ureq::post(url)
        .header("Authorization", &format!("Bearer {token}"))
        .config()
        .http_status_as_error(false)
        .build()
        .send_json(body)
        .with_context(|| format!("POST {url}"))?;
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string()?;
    ensure!((200..300).contains(&status), "POST {url}: {status} {text}");
    Ok(serde_json::from_str(&text)?)
}

impl Cluster {
    /// `edge`: clients reach the nodes through `ferry edge` (else directly,
    /// as in an ice-restart deployment).
    pub(crate) async fn start(max_sessions: usize, edge: bool) -> Result<Cluster> {
        Self::start_with(max_sessions, edge, 2, None).await
    }

    /// `nodes` nodes; with `ha` two scheduler replicas on etcd instead of one on a state file.
    /// The first replica leads at the start; clients and the bench's reads use the second
    /// (the gateway), which survives killing the first.
    pub(crate) async fn start_with(
        max_sessions: usize,
        edge: bool,
        nodes: usize,
        ha: Option<&HaSchedulers>,
    ) -> Result<Cluster> {
        Self::start_opts(max_sessions, edge, nodes, ha, &[]).await
    }

    /// [`Cluster::start_with`], the scheduler started with `scheduler_extra` flags too.
    pub(crate) async fn start_opts(
        max_sessions: usize,
        edge: bool,
        nodes: usize,
        ha: Option<&HaSchedulers>,
        scheduler_extra: &[&str],
    ) -> Result<Cluster> {
        Self::start_full(max_sessions, edge, nodes, ha, scheduler_extra, &[]).await
    }

    /// [`Cluster::start_opts`], the nodes started with `node_extra` flags too.
    pub(crate) async fn start_full(
        max_sessions: usize,
        edge: bool,
        nodes: usize,
        ha: Option<&HaSchedulers>,
        scheduler_extra: &[&str],
        node_extra: &[&str],
    ) -> Result<Cluster> {
        ensure!(nodes <= NODE_IDS.len(), "at most {} nodes", NODE_IDS.len());
        let dir = std::env::temp_dir().join(format!("ferry-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let d = dir.to_str().context("temp dir")?.to_owned();
        let token = format!("{:032x}", rand::random::<u128>());
        let state = format!("{d}/scheduler.json");
        let mut schedulers = Vec::new();
        match ha {
            None => {
                let mut argv = vec![
                    "scheduler",
                    "--http",
                    "127.0.0.1:0",
                    "--state-file",
                    &state,
                    "--token",
                    &token,
                ];
                argv.extend_from_slice(scheduler_extra);
                schedulers.push(ChildProc::spawn(&argv)?)
            }
            Some(ha) => {
                let prefix = bench_etcd_prefix();
                let ttl = ha.lease_ttl_s.to_string();
                for i in 0..2 {
                    schedulers.push(ChildProc::spawn(&[
                        "scheduler",
                        "--http",
                        "127.0.0.1:0",
                        "--store",
                        "etcd",
                        "--etcd-endpoints",
                        &ha.etcd_endpoints,
                        "--etcd-prefix",
                        &prefix,
                        "--lease-ttl-s",
                        &ttl,
                        "--token",
                        &token,
                    ])?);
                    if i == 0 {
                        let url = schedulers[0].after("http")?;
                        wait_for(Duration::from_secs(20), || {
                            let url = url.clone();
                            async move { Ok(leads(&url).await) }
                        })
                        .await
                        .context("the first scheduler replica did not become leader")?;
                    }
                }
            }
        }
        let scheduler_urls = schedulers
            .iter()
            .map(|s| s.after("http"))
            .collect::<Result<Vec<_>>>()?;
        let gateway = scheduler_urls.last().cloned().context("no scheduler")?;
        let scheduler_list = scheduler_urls.join(",");
        let (edge, edge_udp) = if edge {
            let e = ChildProc::spawn(&["edge", "--udp", "127.0.0.1:0", "--cluster-dir", &d])?;
            let udp = e.after("udp")?;
            (Some(e), Some(udp))
        } else {
            (None, None)
        };
        let max = max_sessions.to_string();
        let mut node_args = Vec::new();
        for id in &NODE_IDS[..nodes] {
            let mut argv: Vec<String> = [
                "node",
                "--id",
                id,
                "--http",
                "127.0.0.1:0",
                "--udp",
                "127.0.0.1:0",
                "--scheduler",
                &scheduler_list,
                "--token",
                &token,
                "--cluster-dir",
                &d,
                "--max-sessions",
                &max,
            ]
            .map(str::to_owned)
            .to_vec();
            if let Some(udp) = &edge_udp {
                argv.extend(["--edge".to_owned(), udp.clone()]);
            }
            argv.extend(node_extra.iter().map(|a| (*a).to_owned()));
            node_args.push(argv);
        }
        let mut c = Cluster {
            schedulers: schedulers.into_iter().map(Some).collect(),
            scheduler_urls,
            _edge: edge,
            nodes: (0..nodes).map(|_| None).collect(),
            node_args,
            gateway,
            token,
            node_http: vec![String::new(); nodes],
            dir,
        };
        for i in 0..nodes {
            c.start_node(i)?;
        }
        c.wait_active().await?;
        Ok(c)
    }

    /// SIGKILLs scheduler replica `i`.
    pub(crate) fn kill_scheduler(&mut self, i: usize) {
        self.schedulers[i] = None;
    }

    /// Starts node `i` (again).
    pub(crate) fn start_node(&mut self, i: usize) -> Result<()> {
        let argv: Vec<&str> = self.node_args[i].iter().map(String::as_str).collect();
        let n = ChildProc::spawn(&argv)?;
        self.node_http[i] = n.after("http")?;
        self.nodes[i] = Some(n);
        Ok(())
    }

    /// The process id of node `i`, while it runs.
    pub(crate) fn node_pid(&self, i: usize) -> Option<u32> {
        self.nodes.get(i)?.as_ref().map(ChildProc::pid)
    }

    /// SIGKILLs node `i`.
    pub(crate) fn kill_node(&mut self, i: usize) {
        // Dropping the process kills it (SIGKILL) and reaps it.
        self.nodes[i] = None;
    }

    /// Waits until both nodes are active at the scheduler, with migration addresses.
    pub(crate) async fn wait_active(&self) -> Result<()> {
        let url = format!("{}/v1/nodes", self.gateway);
        wait_for(Duration::from_secs(20), || {
            let url = url.clone();
            async move {
                let nodes = tokio::task::spawn_blocking(move || get_json(&url)).await??;
                Ok(nodes.as_array().is_some_and(|n| {
                    n.len() == self.nodes.len()
                        && n.iter().all(|n| {
                            n["state"] == "active"
                                && n["migration"].as_str().is_some_and(|m| !m.is_empty())
                        })
                }))
            }
        })
        .await
        .context("nodes did not register")
    }

    /// Sessions the scheduler sees on `node`.
    pub(crate) async fn sessions_on(&self, node: &str) -> Result<Vec<String>> {
        let url = format!("{}/v1/sessions", self.gateway);
        let list = tokio::task::spawn_blocking(move || get_json(&url)).await??;
        Ok(list
            .as_array()
            .map(|l| {
                l.iter()
                    .filter(|s| s["node"] == node)
                    .filter_map(|s| s["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn migration_bytes(&self, node: usize) -> Result<(u64, u64)> {
        let url = format!("{}/metrics", self.node_http[node]);
        let text = tokio::task::spawn_blocking(move || -> Result<String> {
            Ok(ureq::get(&url).call()?.body_mut().read_to_string()?)
        })
        .await??;
        let get = |kind: &str| {
            let key = format!("ferry_migration_bytes_total{{kind=\"{kind}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        Ok((get("snapshot"), get("wal")))
    }
}

pub(crate) fn video_packets(s: &PeerStats) -> u64 {
    s.video().map(|r| r.packets).sum()
}

pub(crate) fn video_missing(s: &PeerStats) -> u64 {
    s.video().map(|r| r.received.missing()).sum()
}

pub(crate) fn max_gap(s: &PeerStats) -> Duration {
    s.video()
        .map(|r| r.max_arrival_gap)
        .max()
        .unwrap_or_default()
}

pub(crate) async fn stats(peers: &[SdkPeer]) -> Result<Vec<PeerStats>> {
    let mut out = Vec::with_capacity(peers.len());
    for p in peers {
        out.push(p.stats().await?);
    }
    Ok(out)
}

/// Publisher on `pub_node`, `n` viewers on `view_node`, all playing: SDK sessions with
/// synthetic media, which follow their migrations (whatever the mode) by themselves.
pub(crate) async fn start_media(
    c: &Cluster,
    stream: &str,
    n: usize,
    bitrate: u32,
    pub_node: usize,
    view_node: usize,
) -> Result<(SdkPeer, Vec<SdkPeer>)> {
    let clocks = Clocks::now();
    let publisher = bench_peer::start(
        &c.gateway,
        &c.token,
        Some(&c.node_http[pub_node]),
        stream,
        Some(Codec::Vp8),
        1,
        bitrate,
        &clocks,
    )
    .await?;
    if pub_node != view_node {
        // The viewers' node finds the origin in the routing table.
        wait_for(Duration::from_secs(10), || async {
            Ok(!c.sessions_on(NODE_IDS[pub_node]).await?.is_empty())
        })
        .await?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let mut starts = Vec::with_capacity(n);
    for i in 0..n {
        let (gateway, token, node, stream, clocks) = (
            c.gateway.clone(),
            c.token.clone(),
            c.node_http[view_node].clone(),
            stream.to_owned(),
            clocks.clone(),
        );
        starts.push(tokio::spawn(async move {
            bench_peer::start(
                &gateway,
                &token,
                Some(&node),
                &stream,
                None,
                100 + i as u64,
                bitrate,
                &clocks,
            )
            .await
        }));
    }
    let mut viewers = Vec::with_capacity(n);
    for s in starts {
        viewers.push(s.await??);
    }
    // Hundreds of DTLS handshakes share the machine with the cluster.
    wait_for(Duration::from_secs(60 + n as u64 / 2), || async {
        for v in &viewers {
            let s = v.stats().await?;
            if !s.connected || video_packets(&s) == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
    .context("viewers did not all start playing")?;
    Ok((publisher, viewers))
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[derive(Debug, Serialize)]
struct MigrateRow {
    sessions: usize,
    mode: String,
    concurrency: usize,
    committed: usize,
    failed: usize,
    /// Mean interval between video packets without a migration.
    normal_gap_ms: f64,
    /// Largest arrival gap in a 2 s window without a migration (median
    /// over viewers): the frame spacing.
    normal_max_gap_p50_ms: f64,
    /// Largest gap during the migration minus the mean interval (the
    /// stricter reading of "normal gap"; includes one frame interval).
    gap_over_mean_p50_ms: f64,
    /// Per viewer: largest gap during the migration window minus that
    /// viewer's largest gap without a migration.
    blackout_p50_ms: f64,
    blackout_p99_ms: f64,
    blackout_max_ms: f64,
    /// What the migrator itself reports (freeze to commit + half an RTT).
    reported_blackout_p50_ms: f64,
    total_p50_ms: f64,
    total_max_ms: f64,
    batch_ms: f64,
    snapshot_bytes_per_session: f64,
    wal_bytes_per_session: f64,
    /// Lost after repair from the first migration to 2 s after the last.
    packets_missing: u64,
    /// Lost after repair in the 2 s window before (the machine's own loss).
    packets_missing_baseline_2s: u64,
    /// ice-restart mode: viewers that followed their `migrate` event with a
    /// successful ICE restart at the target.
    ice_restarts: u64,
}

async fn migrate_run(n: usize, args: &MigrateArgs) -> Result<MigrateRow> {
    let ice = args.mode == "ice-restart";
    let c = Cluster::start(n + 10, !ice).await?;
    let (_publisher, viewers) = start_media(&c, "bench", n, args.bitrate, 0, 0).await?;
    // Baseline window: the normal packet spacing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s0 = stats(&viewers).await?;
    for v in &viewers {
        v.reset_gaps().await?;
    }
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s1 = stats(&viewers).await?;
    // Per viewer, the largest gap without a migration: a frame's packets
    // arrive together, so this is about one frame interval.
    let normal_max: Vec<f64> = s1.iter().map(|s| max_gap(s).as_secs_f64()).collect();
    let missing_before: u64 = s1.iter().map(video_missing).sum();
    // Saturating: a packet missing at s0 may have been repaired by s1.
    let baseline_missing = missing_before.saturating_sub(s0.iter().map(video_missing).sum::<u64>());
    let packets: u64 = s1
        .iter()
        .zip(&s0)
        .map(|(b, a)| video_packets(b) - video_packets(a))
        .sum();
    let normal_gap = t0.elapsed().as_secs_f64() * n as f64 / packets.max(1) as f64;
    let ids = c.sessions_on("node-a").await?;
    let publisher_id = {
        // The publisher is the first session created; viewers are the rest.
        let url = format!("{}/v1/sessions", c.gateway);
        let list = tokio::task::spawn_blocking(move || get_json(&url)).await??;
        list.as_array()
            .and_then(|l| l.iter().find(|s| s["kind"] == "publish"))
            .and_then(|s| s["id"].as_str().map(str::to_owned))
            .context("no publisher in the scheduler's sessions")?
    };
    let viewer_ids: Vec<String> = ids.into_iter().filter(|s| *s != publisher_id).collect();
    ensure!(
        viewer_ids.len() == n,
        "{} viewers on node-a, expected {n}",
        viewer_ids.len()
    );
    let bytes0 = c.migration_bytes(0).await?;
    for v in &viewers {
        v.reset_gaps().await?;
    }
    let start = Instant::now();
    let mut queue: std::collections::VecDeque<&String> = viewer_ids.iter().collect();
    let mut running: Vec<(String, Instant)> = Vec::new();
    let mut totals = Vec::new();
    let mut reported = Vec::new();
    let (mut committed, mut failed) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !running.is_empty() || !queue.is_empty() {
        ensure!(
            Instant::now() < deadline,
            "{} migrations still running",
            running.len()
        );
        while running.len() < args.concurrency.max(1) {
            let Some(session) = queue.pop_front() else {
                break;
            };
            let body =
                serde_json::json!({ "session": session, "target": "node-b", "mode": args.mode });
            let (url, token) = (format!("{}/v1/migrations", c.gateway), c.token.clone());
            let t = Instant::now();
            let v = tokio::task::spawn_blocking(move || post_json(&url, &token, &body)).await??;
            running.push((v["id"].as_str().context("id")?.to_owned(), t));
        }
        let mut still = Vec::new();
        for (id, t) in running {
            let url = format!("{}/v1/migrations/{id}", c.gateway);
            let v = tokio::task::spawn_blocking(move || get_json(&url)).await??;
            match v["state"].as_str() {
                Some("committed") => {
                    committed += 1;
                    totals.push(t.elapsed().as_secs_f64() * 1e3);
                    reported.push(v["blackout_ms"].as_f64().unwrap_or(0.0));
                    if std::env::var_os("FERRY_BENCH_VERBOSE").is_some() {
                        eprintln!(
                            "migration {id}: {} blackout {} ms",
                            v["phases_ms"], v["blackout_ms"]
                        );
                    }
                }
                Some("rolled_back" | "failed") => {
                    failed += 1;
                    eprintln!("migration {id}: {v}");
                }
                _ => still.push((id, t)),
            }
        }
        running = still;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let batch = start.elapsed();
    if ice {
        // Every moved viewer follows its event with an ICE restart.
        let want = committed as u64;
        let _ = wait_for(Duration::from_secs(10), || async {
            Ok(viewers.iter().map(SdkPeer::ice_restarts).sum::<u64>() >= want)
        })
        .await;
    }
    // Keep playing a while so late repairs land, then read the window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s2 = stats(&viewers).await?;
    let bytes1 = c.migration_bytes(0).await?;
    let mut blackouts: Vec<f64> = s2
        .iter()
        .zip(&normal_max)
        .map(|(s, normal)| (max_gap(s).as_secs_f64() - normal).max(0.0) * 1e3)
        .collect();
    blackouts.sort_by(f64::total_cmp);
    let mut over_mean: Vec<f64> = s2
        .iter()
        .map(|s| (max_gap(s).as_secs_f64() - normal_gap).max(0.0) * 1e3)
        .collect();
    over_mean.sort_by(f64::total_cmp);
    let mut normal_max = normal_max;
    normal_max.sort_by(f64::total_cmp);
    totals.sort_by(f64::total_cmp);
    reported.sort_by(f64::total_cmp);
    let missing = s2
        .iter()
        .map(video_missing)
        .sum::<u64>()
        .saturating_sub(missing_before);
    Ok(MigrateRow {
        sessions: n,
        mode: args.mode.clone(),
        concurrency: args.concurrency,
        committed,
        failed,
        normal_gap_ms: normal_gap * 1e3,
        normal_max_gap_p50_ms: percentile(&normal_max, 0.5) * 1e3,
        gap_over_mean_p50_ms: percentile(&over_mean, 0.5),
        blackout_p50_ms: percentile(&blackouts, 0.5),
        blackout_p99_ms: percentile(&blackouts, 0.99),
        blackout_max_ms: blackouts.last().copied().unwrap_or(0.0),
        reported_blackout_p50_ms: percentile(&reported, 0.5),
        total_p50_ms: percentile(&totals, 0.5),
        total_max_ms: totals.last().copied().unwrap_or(0.0),
        batch_ms: batch.as_secs_f64() * 1e3,
        snapshot_bytes_per_session: (bytes1.0 - bytes0.0) as f64 / n as f64,
        wal_bytes_per_session: (bytes1.1 - bytes0.1) as f64 / n as f64,
        packets_missing: missing,
        packets_missing_baseline_2s: baseline_missing,
        ice_restarts: viewers.iter().map(SdkPeer::ice_restarts).sum(),
    })
}

pub(crate) fn write_json<T: Serialize>(out: &PathBuf, rows: &T) -> Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, serde_json::to_string_pretty(rows)?)?;
    println!("wrote {}", out.display());
    Ok(())
}

pub async fn migrate(args: MigrateArgs) -> Result<()> {
    if !["edge", "ice-restart", "reconnect"].contains(&args.mode.as_str()) {
        bail!("--mode must be edge, ice-restart or reconnect");
    }
    let mut rows = Vec::new();
    for &n in &args.sessions {
        let row = migrate_run(n, &args)
            .await
            .with_context(|| format!("{n} sessions"))?;
        eprintln!("{row:?}");
        rows.push(row);
    }
    println!(
        "{:>8} {:>11} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>7} {:>7}",
        "sessions",
        "mode",
        "gap ms",
        "max gap",
        "-mean",
        "bo p50",
        "bo p99",
        "bo max",
        "tot p50",
        "tot max",
        "batch ms",
        "snap B/s",
        "wal B/s",
        "missing",
        "base 2s"
    );
    for r in &rows {
        println!(
            "{:>8} {:>11} {:>7.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.0} {:>10.0} {:>9.0} {:>7} {:>7}",
            r.sessions,
            r.mode,
            r.normal_gap_ms,
            r.normal_max_gap_p50_ms,
            r.gap_over_mean_p50_ms,
            r.blackout_p50_ms,
            r.blackout_p99_ms,
            r.blackout_max_ms,
            r.total_p50_ms,
            r.total_max_ms,
            r.batch_ms,
            r.snapshot_bytes_per_session,
            r.wal_bytes_per_session,
            r.packets_missing,
            r.packets_missing_baseline_2s
        );
        if r.failed > 0 {
            println!("  {} of {} migrations failed", r.failed, r.sessions);
        }
        if r.mode == "ice-restart" {
            println!(
                "  {} of {} viewers restarted ICE at the target",
                r.ice_restarts, r.sessions
            );
        }
    }
    write_json(&args.out, &rows)
}

#[derive(Debug, Serialize)]
struct DrainRow {
    sessions: usize,
    drain_ms: f64,
    migrations_committed: u64,
    migrations_failed: u64,
    /// Lost after repair from the drain's start to 2 s after its end.
    packets_missing: u64,
    /// Lost after repair in 5 s before the drain (the machine's own loss).
    packets_missing_baseline_5s: u64,
    viewers_connected_after: usize,
}

pub async fn drain(args: DrainArgs) -> Result<()> {
    let n = args.sessions;
    let c = Cluster::start(n + 10, true).await?;
    // Publisher on node-b, the N viewers on node-a (relayed): draining
    // node-a moves only viewers and the publisher keeps sending.
    let (_publisher, viewers) = start_media(&c, "drain", n, args.bitrate, 1, 0).await?;
    // A window without migration: what the machine loses on its own.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b0: u64 = stats(&viewers).await?.iter().map(video_missing).sum();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let b1: u64 = stats(&viewers).await?.iter().map(video_missing).sum();
    let s0: u64 = b1;
    let start = Instant::now();
    let url = format!("{}/v1/nodes/node-a/drain", c.gateway);
    let token = c.token.clone();
    tokio::task::spawn_blocking(move || post_json(&url, &token, &Value::Null)).await??;
    let status_url = format!("{}/v1/nodes/node-a/drain", c.gateway);
    let status = loop {
        let url = status_url.clone();
        let s = tokio::task::spawn_blocking(move || get_json(&url)).await??;
        if s["state"] == "drained" || s["sessions_left"].as_u64() == Some(0) {
            break s;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(600),
            "node-a did not drain: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let drain_ms = start.elapsed().as_secs_f64() * 1e3;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = stats(&viewers).await?;
    let row = DrainRow {
        sessions: n,
        drain_ms,
        migrations_committed: status["migrations_committed"].as_u64().unwrap_or(0),
        migrations_failed: status["migrations_failed"].as_u64().unwrap_or(0),
        packets_missing: s.iter().map(video_missing).sum::<u64>().saturating_sub(s0),
        packets_missing_baseline_5s: b1.saturating_sub(b0),
        viewers_connected_after: s.iter().filter(|s| s.connected).count(),
    };
    println!(
        "{:>8} {:>10} {:>9} {:>7} {:>8} {:>12} {:>10}",
        "sessions", "drain ms", "committed", "failed", "missing", "baseline 5s", "connected"
    );
    println!(
        "{:>8} {:>10.0} {:>9} {:>7} {:>8} {:>12} {:>10}",
        row.sessions,
        row.drain_ms,
        row.migrations_committed,
        row.migrations_failed,
        row.packets_missing,
        row.packets_missing_baseline_5s,
        row.viewers_connected_after
    );
    write_json(&args.out, &row)?;
    if row.packets_missing > 0 {
        bail!("{} packets lost during the drain", row.packets_missing);
    }
    Ok(())
}
