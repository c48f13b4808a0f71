//! A local `ferry` cluster as separate processes — `ferry scheduler`, `ferry edge`, `ferry
//! node` ×N sharing one secrets directory (optionally HA schedulers over etcd) — and the HTTP
//! calls and media set-ups the benchmarks make against it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ferry_sfu::codec::Codec;
use ferry_sfu::peer::PeerStats;
use serde_json::Value;

use super::process::{ChildProc, Clocks, wait_for};
use super::sdk_peer::{self, SdkPeer};

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

    pub(super) async fn migration_bytes(&self, node: usize) -> Result<(u64, u64)> {
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
    let publisher = sdk_peer::start(
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
            sdk_peer::start(
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
