//! `ferry bench ha`: the scheduler's high availability with media flowing. A real 3-member etcd
//! cluster on loopback, two `ferry scheduler --store etcd` replicas, an edge and three nodes
//! (separate processes); one SDK publisher on node-b and N SDK viewers on node-a.
//!
//! 1. **Leader killed mid-drain**: drain node-a; once a fifth of its sessions moved, SIGKILL the
//!    leading replica. Measured: time until the other replica leads (it must be within the lease
//!    TTL plus a second of campaigning), the drain's end (every session moved), packets lost at
//!    the viewers after repair (must be 0; the machine's own loss in a 5 s window before is the
//!    baseline), and that no node was declared down for the gap (their etcd leases are the new
//!    leader's to keep: it adopts them).
//! 2. **etcd member killed**: SIGKILL one member, then move 10 viewers between node-b and
//!    node-c through the API: the leader stays, every move commits, 0 packets lost.
//! 3. **Node killed**: SIGKILL node-c: time until the scheduler marks it `down` (its viewers
//!    report it and the scheduler's probe fails, or at the latest its etcd lease ends), until
//!    etcd ends its lease (its key goes), and until each of its viewers plays again elsewhere
//!    (the SDK re-places them through the gateway).
//!
//! Prints a table, writes JSON, and exits non-zero when an invariant does not hold.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde::Serialize;
use serde_json::{Value, json};

use super::cluster::{
    Cluster, HaSchedulers, get_json, leads, post_json, start_media, stats, video_missing,
};
use super::etcd::EtcdCluster;
use super::process::wait_for;
use super::report::write_json;

/// A node's etcd lease: `ferry scheduler`'s heartbeat interval times the beats it may miss.
const NODE_LEASE: Duration = Duration::from_secs(3);

/// Options of `ferry bench ha`.
#[derive(clap::Args, Debug)]
pub struct HaArgs {
    /// Viewers on the drained node.
    #[arg(long, default_value_t = 50)]
    sessions: usize,
    /// Publisher video bitrate in bit/s.
    #[arg(long, default_value_t = 300_000)]
    bitrate: u32,
    /// The scheduler replicas' leader lease, seconds (`ferry scheduler`'s default).
    #[arg(long, default_value_t = 5)]
    lease_ttl_s: u64,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/ha.json")]
    out: PathBuf,
}

#[derive(Debug, Default, Serialize)]
struct HaReport {
    sessions: usize,
    lease_ttl_s: u64,
    /// Drain moves committed when the leader was killed.
    committed_at_kill: u64,
    /// From the SIGKILL of the leader to the other replica leading.
    failover_ms: f64,
    /// From the drain's start to node-a drained.
    drain_ms: f64,
    drain_committed: u64,
    drain_failed: u64,
    /// Lost after repair, drain start to 2 s after its end.
    drain_packets_missing: u64,
    /// Lost after repair in 5 s before the drain (the machine's own loss).
    baseline_packets_missing_5s: u64,
    /// Moves through the API with one etcd member dead.
    moves_with_member_down: usize,
    moves_committed_with_member_down: usize,
    leader_kept_with_member_down: bool,
    /// The etcd member killed was etcd's raft leader.
    etcd_member_killed_was_raft_leader: bool,
    member_down_packets_missing: u64,
    /// Viewers on node-c when it was killed.
    node_kill_viewers: usize,
    /// Nodes down after the failover, once their leases (3 s) could have ended.
    nodes_down_after_failover: usize,
    /// From the SIGKILL of node-c to `down` at the scheduler.
    node_down_ms: f64,
    /// From the SIGKILL of node-c to etcd deleting its key (its lease ended).
    node_lease_expired_ms: f64,
    /// Its viewers playing again elsewhere.
    node_kill_recovered: usize,
    node_kill_recovery_p50_ms: f64,
    node_kill_recovery_max_ms: f64,
}

/// A JSON GET through the gateway.
async fn get(url: String) -> Result<Value> {
    tokio::task::spawn_blocking(move || get_json(&url)).await?
}

/// The drain of a node as the gateway replica reads it: `{}` while that replica (a follower)
/// has not yet loaded the state the leader stored with it (its GET answers 404 until then).
async fn drain(url: String) -> Result<Value> {
    tokio::task::spawn_blocking(move || {
        let mut r = ureq::get(&url)
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .with_context(|| format!("GET {url}"))?;
        match r.status().as_u16() {
            200 => Ok(r.body_mut().read_json()?),
            404 => Ok(json!({})),
            s => bail!("GET {url}: {s}"),
        }
    })
    .await?
}

/// A JSON POST with the API token.
async fn post(url: String, token: String, body: Value) -> Result<Value> {
    tokio::task::spawn_blocking(move || post_json(&url, &token, &body)).await?
}

/// The viewer sessions the scheduler places on `node`.
async fn viewers_on(c: &Cluster, node: &str) -> Result<Vec<String>> {
    let list = get(format!("{}/v1/sessions", c.gateway)).await?;
    Ok(list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["node"] == node && s["kind"] == "view")
        .filter_map(|s| s["id"].as_str().map(str::to_owned))
        .collect())
}

/// Follows migration `id` at the gateway until it ends; whether it committed.
async fn committed(c: &Cluster, id: &str) -> Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = get(format!("{}/v1/migrations/{id}", c.gateway)).await?;
        match m["state"].as_str() {
            Some("committed") => return Ok(true),
            Some("failed" | "rolled_back") => return Ok(false),
            _ if Instant::now() > deadline => return Ok(false),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub async fn ha(args: HaArgs) -> Result<()> {
    ensure!(args.sessions >= 10, "--sessions must be at least 10");
    ensure!(args.lease_ttl_s >= 1, "--lease-ttl-s must be at least 1");
    let n = args.sessions;
    let mut etcd = EtcdCluster::start(3)?;
    let ha = HaSchedulers {
        etcd_endpoints: etcd.endpoints(),
        lease_ttl_s: args.lease_ttl_s,
    };
    let mut c = Cluster::start_with(n + 20, true, 3, Some(&ha)).await?;
    let mut r = HaReport {
        sessions: n,
        lease_ttl_s: args.lease_ttl_s,
        ..HaReport::default()
    };
    let (leader, follower) = (c.scheduler_urls[0].clone(), c.scheduler_urls[1].clone());
    ensure!(leads(&leader).await, "the first replica does not lead");

    // Publisher on node-b, the viewers on node-a (relayed).
    let (_publisher, mut viewers) = start_media(&c, "ha", n, args.bitrate, 1, 0).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b0: u64 = stats(&viewers).await?.iter().map(video_missing).sum();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let b1: u64 = stats(&viewers).await?.iter().map(video_missing).sum();
    r.baseline_packets_missing_5s = b1.saturating_sub(b0);

    // 1. The leader dies during the drain.
    let drain_url = format!("{}/v1/nodes/node-a/drain", c.gateway);
    let start = Instant::now();
    // Through the follower: it redirects the write to the leader.
    let link = ferry_sfu::driver::scheduler_link::SchedulerLink::new(&follower, &c.token);
    let answer = tokio::task::spawn_blocking(move || {
        link.call(
            "/v1/nodes/node-a/drain",
            Some(&Value::Null),
            Duration::from_secs(5),
        )
    })
    .await??;
    ensure!(
        answer.status == 202,
        "starting the drain through the follower: {} {}",
        answer.status,
        answer.body
    );
    let kill_at = (n / 5) as u64;
    loop {
        let s = drain(drain_url.clone()).await?;
        let done = s["migrations_committed"].as_u64().unwrap_or(0);
        if done >= kill_at {
            r.committed_at_kill = done;
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the drain does not progress: {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = Instant::now();
    c.kill_scheduler(0);
    wait_for(Duration::from_secs(args.lease_ttl_s + 10), || {
        let url = follower.clone();
        async move { Ok(leads(&url).await) }
    })
    .await
    .context("no replica leads after the leader was killed")?;
    r.failover_ms = killed.elapsed().as_secs_f64() * 1e3;
    let took_over = Instant::now();
    let status = loop {
        let s = drain(drain_url.clone()).await?;
        if s["state"] == "drained" {
            break s;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(600),
            "node-a did not drain after the failover: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    r.drain_ms = start.elapsed().as_secs_f64() * 1e3;
    r.drain_committed = status["migrations_committed"].as_u64().unwrap_or(0);
    r.drain_failed = status["migrations_failed"].as_u64().unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The new leader gave every node a lease at the takeover: past its end, the nodes that
    // heartbeat to the new leader are still up.
    tokio::time::sleep_until((took_over + NODE_LEASE + Duration::from_millis(1500)).into()).await;
    let nodes = get(format!("{}/v1/nodes", c.gateway)).await?;
    r.nodes_down_after_failover = nodes
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["state"] == "down")
        .count();
    let m1: u64 = stats(&viewers).await?.iter().map(video_missing).sum();
    r.drain_packets_missing = m1.saturating_sub(b1);

    // 2. One etcd member dies — the raft leader, the member whose death costs the most (an
    // election); writes go on.
    let member = etcd.raft_leader()?;
    r.etcd_member_killed_was_raft_leader = true;
    etcd.kill(member);
    // The drain spread node-a's viewers by weight over node-b and node-c: 10 of the larger
    // share move to the other.
    let (on_b, on_c) = (
        viewers_on(&c, "node-b").await?,
        viewers_on(&c, "node-c").await?,
    );
    let (from, target) = if on_b.len() >= on_c.len() {
        (on_b, "node-c")
    } else {
        (on_c, "node-b")
    };
    let moving: Vec<String> = from.into_iter().take(10).collect();
    r.moves_with_member_down = moving.len();
    let mut ids = Vec::new();
    for session in &moving {
        let m = post(
            format!("{}/v1/migrations", c.gateway),
            c.token.clone(),
            json!({"session": session, "target": target, "mode": "edge"}),
        )
        .await?;
        ids.push(m["id"].as_str().context("migration id")?.to_owned());
    }
    for id in &ids {
        if committed(&c, id).await? {
            r.moves_committed_with_member_down += 1;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.leader_kept_with_member_down = leads(&follower).await;
    let m2: u64 = stats(&viewers).await?.iter().map(video_missing).sum();
    r.member_down_packets_missing = m2.saturating_sub(m1);

    // 3. node-c dies: down at its lease's end, its viewers re-placed.
    let on_c = viewers_on(&c, "node-c").await?;
    r.node_kill_viewers = on_c.len();
    let killed = Instant::now();
    c.kill_node(2);
    let nodes_url = format!("{}/v1/nodes/node-c", c.gateway);
    wait_for(Duration::from_secs(30), || {
        let url = nodes_url.clone();
        async move { Ok(get(url).await?["state"] == "down") }
    })
    .await
    .context("node-c was not marked down")?;
    r.node_down_ms = killed.elapsed().as_secs_f64() * 1e3;
    let key = format!("{}/nodes/node-c", super::cluster::bench_etcd_prefix());
    loop {
        if !etcd.has_key(&key)? {
            r.node_lease_expired_ms = killed.elapsed().as_secs_f64() * 1e3;
            break;
        }
        ensure!(
            killed.elapsed() < Duration::from_secs(30),
            "node-c's etcd lease did not end"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut recovery = Vec::new();
    for v in viewers
        .iter_mut()
        .filter(|v| v.id().is_some_and(|id| on_c.contains(&id)))
    {
        let left = Duration::from_secs(30).saturating_sub(killed.elapsed());
        if let Some(at) = v.reconnected(left).await {
            recovery.push(at.saturating_duration_since(killed).as_secs_f64() * 1e3);
        }
    }
    recovery.sort_by(f64::total_cmp);
    r.node_kill_recovered = recovery.len();
    r.node_kill_recovery_p50_ms = super::report::percentile(&recovery, 0.5);
    r.node_kill_recovery_max_ms = recovery.last().copied().unwrap_or(0.0);

    println!("{:<34} {:>10}", "leader killed mid-drain", "value");
    for (k, v) in [
        ("sessions drained", format!("{}", r.sessions)),
        (
            "moves committed at the kill",
            format!("{}", r.committed_at_kill),
        ),
        ("failover (new leader) ms", format!("{:.0}", r.failover_ms)),
        ("drain ms", format!("{:.0}", r.drain_ms)),
        (
            "drain committed / failed",
            format!("{} / {}", r.drain_committed, r.drain_failed),
        ),
        (
            "packets missing (drain)",
            format!("{}", r.drain_packets_missing),
        ),
        (
            "packets missing (baseline 5 s)",
            format!("{}", r.baseline_packets_missing_5s),
        ),
        (
            "nodes down after the failover",
            format!("{}", r.nodes_down_after_failover),
        ),
        (
            "moves with an etcd member down",
            format!(
                "{} / {}",
                r.moves_committed_with_member_down, r.moves_with_member_down
            ),
        ),
        ("leader kept", format!("{}", r.leader_kept_with_member_down)),
        (
            "packets missing (member down)",
            format!("{}", r.member_down_packets_missing),
        ),
        (
            "viewers on the killed node",
            format!("{}", r.node_kill_viewers),
        ),
        ("node down after ms", format!("{:.0}", r.node_down_ms)),
        (
            "node's etcd lease ended after ms",
            format!("{:.0}", r.node_lease_expired_ms),
        ),
        (
            "viewers recovered",
            format!("{} / {}", r.node_kill_recovered, r.node_kill_viewers),
        ),
        (
            "recovery p50 / max ms",
            format!(
                "{:.0} / {:.0}",
                r.node_kill_recovery_p50_ms, r.node_kill_recovery_max_ms
            ),
        ),
    ] {
        println!("{k:<34} {v:>10}");
    }
    write_json(&args.out, &r)?;

    let ttl_ms = args.lease_ttl_s as f64 * 1e3;
    let mut broken = Vec::new();
    if r.failover_ms > ttl_ms + 1000.0 {
        broken.push(format!(
            "failover took {:.0} ms, more than the {ttl_ms:.0} ms lease and a second",
            r.failover_ms
        ));
    }
    if r.drain_committed < n as u64 {
        broken.push(format!(
            "the drain committed {} of {n} moves",
            r.drain_committed
        ));
    }
    if r.drain_packets_missing > 0 || r.member_down_packets_missing > 0 {
        broken.push(format!(
            "packets lost: {} during the drain, {} with an etcd member down",
            r.drain_packets_missing, r.member_down_packets_missing
        ));
    }
    if r.moves_with_member_down < 10
        || r.moves_committed_with_member_down < r.moves_with_member_down
        || !r.leader_kept_with_member_down
    {
        broken.push("an etcd member's death was visible".into());
    }
    if r.nodes_down_after_failover > 0 {
        broken.push(format!(
            "{} nodes were declared down after the leader's failover",
            r.nodes_down_after_failover
        ));
    }
    let lease_ms = NODE_LEASE.as_secs_f64() * 1e3;
    if r.node_down_ms > lease_ms + 1500.0 || r.node_lease_expired_ms > lease_ms + 1500.0 {
        broken.push(format!(
            "the killed node was down after {:.0} ms, its lease ended after {:.0} ms (lease {lease_ms:.0} ms)",
            r.node_down_ms, r.node_lease_expired_ms
        ));
    }
    if r.node_kill_viewers == 0 || r.node_kill_recovered < r.node_kill_viewers {
        broken.push(format!(
            "{} of {} viewers of the killed node recovered",
            r.node_kill_recovered, r.node_kill_viewers
        ));
    }
    if !broken.is_empty() {
        bail!("{}", broken.join("; "));
    }
    Ok(())
}
