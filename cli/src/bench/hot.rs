//! `ferry bench hot-stream`: one stream with more viewers than its origin's share
//! (`--hot-stream-viewers` on the scheduler). The bench starts a scheduler and `--nodes` nodes,
//! publishes to the first node, opens `--viewers` SDK viewers through the gateway in one burst
//! (the scheduler places them: the origin up to its share, then other nodes by bounded-load
//! consistent hashing keyed by the stream, fed by the cascade relay), and reports per node the
//! viewers, CPU and relay packets, and per viewer what it received.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ferry_sfu::codec::Codec;
use ferry_sfu::peer::LatencyStats;
use serde::Serialize;
use serde_json::Value;

use super::cluster::{Cluster, NODE_IDS, get_json};
use super::process::{Clocks, clock_ticks, cpu_seconds, wait_for};
use super::sdk_peer::{self, SdkPeer};

/// Options of `ferry bench hot-stream`.
#[derive(clap::Args, Debug)]
pub struct HotStreamArgs {
    /// Viewers of the stream.
    #[arg(long, default_value_t = 60)]
    viewers: usize,
    /// Nodes (at most 3).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Viewers the origin serves before the stream spills to other nodes.
    #[arg(long, default_value_t = 20)]
    origin_share: u64,
    /// Publisher video bitrate in bit/s.
    #[arg(long, default_value_t = 1_000_000)]
    bitrate: u32,
    /// Measured seconds (after every viewer plays).
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Sessions each node accepts (default: viewers + 10); fewer spread the spilled viewers
    /// over more nodes once the first is full.
    #[arg(long)]
    node_sessions: Option<usize>,
    /// The nodes' `--relay-fanout`: with 3 nodes and 1, the third gets the stream from the
    /// second (a relay tree of depth 2).
    #[arg(long, default_value_t = ferry_sfu::node::RELAY_FANOUT)]
    relay_fanout: usize,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/hot-stream.json")]
    out: PathBuf,
}

#[derive(Debug, Serialize)]
struct NodeRow {
    node: String,
    viewers: u64,
    /// Sessions on it (viewers and the publisher).
    sessions: u64,
    cpu_cores: f64,
    /// Media packets it relayed to other nodes per second.
    relay_out_pps: f64,
    /// Media packets it received from a relay per second.
    relay_in_pps: f64,
    /// Of those relayed out, received from a relay first (one level down the tree), per second.
    relay_on_pps: f64,
    /// Relay subscribers it sent one level down (or back to the origin).
    relay_redirects: f64,
    /// The node it gets the stream from (`GET /v1/streams` `relayed_from`), if relayed.
    fed_by: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    viewers: usize,
    nodes: usize,
    origin_share: u64,
    relay_fanout: usize,
    origin: String,
    duration_s: f64,
    per_node: Vec<NodeRow>,
    /// Most sessions on one node over the mean: the bounded-load factor seen.
    max_over_mean: f64,
    /// Video packets per second each viewer received: min, median.
    viewer_pps_min: f64,
    viewer_pps_median: f64,
    latency_p50_us: Option<u64>,
    latency_p99_us: Option<u64>,
    /// Viewers missing packets at the end.
    viewers_missing: usize,
    /// Seconds from the first viewer's request to every viewer playing.
    all_playing_s: f64,
}

pub(crate) async fn hot_stream(args: HotStreamArgs) -> Result<()> {
    ensure!(
        (2..=NODE_IDS.len()).contains(&args.nodes),
        "--nodes is 2 or 3"
    );
    let share = args.origin_share.to_string();
    let fanout = args.relay_fanout.to_string();
    let c = Cluster::start_full(
        args.node_sessions.unwrap_or(args.viewers + 10),
        false,
        args.nodes,
        None,
        &["--hot-stream-viewers", &share],
        &["--relay-fanout", &fanout],
    )
    .await?;
    let clocks = Clocks::now();
    let stream = "hot";
    let publisher = sdk_peer::start(
        &c.gateway,
        &c.token,
        Some(&c.node_http[0]),
        stream,
        Some(Codec::Vp8),
        1,
        args.bitrate,
        &clocks,
    )
    .await
    .context("publisher")?;
    let origin = publisher.node().context("the publisher's node")?;
    wait_for(Duration::from_secs(20), || async {
        Ok(stream_entry(&c.gateway, stream).await?["origin"] == origin.as_str())
    })
    .await
    .context("the scheduler did not see the publisher")?;

    // One burst: every viewer asks the gateway at once.
    let t0 = Instant::now();
    let opens = (0..args.viewers).map(|i| {
        let (gateway, token, clocks) = (c.gateway.clone(), c.token.clone(), clocks.clone());
        let bitrate = args.bitrate;
        tokio::spawn(async move {
            sdk_peer::start(
                &gateway,
                &token,
                None,
                stream,
                None,
                100 + i as u64,
                bitrate,
                &clocks,
            )
            .await
        })
    });
    let mut viewers: Vec<SdkPeer> = Vec::new();
    for (i, h) in opens.collect::<Vec<_>>().into_iter().enumerate() {
        viewers.push(h.await?.with_context(|| format!("viewer {i}"))?);
    }
    wait_for(Duration::from_secs(60), || async {
        for v in &viewers {
            if v.stats().await?.video().map(|r| r.packets).sum::<u64>() == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
    .context("the viewers did not all play")?;
    let all_playing_s = t0.elapsed().as_secs_f64();
    // Heartbeats carry the sessions every second.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let ticks = clock_ticks();
    let sample = || async {
        let mut out = Vec::new();
        for (i, url) in c.node_http.iter().enumerate() {
            let cpu = c.node_pid(i).map_or(Ok(0.0), |p| cpu_seconds(p, ticks))?;
            let m = metrics(url).await?;
            out.push((cpu, m.0, m.1, m.2, m.3));
        }
        anyhow::Ok(out)
    };
    let packets = |s: &[ferry_sdk::PeerStats]| -> Vec<u64> {
        s.iter()
            .map(|s| s.video().map(|r| r.packets).sum())
            .collect()
    };
    let mut s0 = Vec::new();
    for v in &viewers {
        s0.push(v.stats().await?);
    }
    let n0 = sample().await?;
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    let mut s1 = Vec::new();
    for v in &viewers {
        s1.push(v.stats().await?);
    }
    let n1 = sample().await?;
    let dur = t.elapsed().as_secs_f64();

    let entry = stream_entry(&c.gateway, stream).await?;
    let sessions = get_json(&format!("{}/v1/sessions", c.gateway))?;
    let mut per_node = Vec::new();
    for (i, id) in NODE_IDS[..args.nodes].iter().enumerate() {
        let on = sessions
            .as_array()
            .map_or(0, |l| l.iter().filter(|s| s["node"] == *id).count()) as u64;
        per_node.push(NodeRow {
            node: (*id).to_owned(),
            viewers: entry["viewers_by_node"][*id].as_u64().unwrap_or(0),
            sessions: on,
            cpu_cores: (n1[i].0 - n0[i].0) / dur,
            relay_out_pps: (n1[i].1 - n0[i].1) / dur,
            relay_in_pps: (n1[i].2 - n0[i].2) / dur,
            relay_on_pps: (n1[i].3 - n0[i].3) / dur,
            relay_redirects: n1[i].4,
            fed_by: entry["relayed_from"][*id].as_str().map(str::to_owned),
        });
    }
    let mean = per_node.iter().map(|n| n.sessions as f64).sum::<f64>() / args.nodes as f64;
    let max = per_node.iter().map(|n| n.sessions).max().unwrap_or(0) as f64;
    let mut pps: Vec<f64> = packets(&s1)
        .iter()
        .zip(packets(&s0))
        .map(|(b, a)| (b - a) as f64 / dur)
        .collect();
    pps.sort_by(f64::total_cmp);
    let mut lat = LatencyStats::default();
    for s in &s1 {
        for r in s.video() {
            lat.merge(&r.latency);
        }
    }
    let report = Report {
        viewers: args.viewers,
        nodes: args.nodes,
        origin_share: args.origin_share,
        relay_fanout: args.relay_fanout,
        origin: origin.clone(),
        duration_s: dur,
        per_node,
        max_over_mean: max / mean.max(1.0),
        viewer_pps_min: pps.first().copied().unwrap_or(0.0),
        viewer_pps_median: pps.get(pps.len() / 2).copied().unwrap_or(0.0),
        latency_p50_us: lat.quantile_us(0.5),
        latency_p99_us: lat.quantile_us(0.99),
        viewers_missing: s1
            .iter()
            .filter(|s| s.video().any(|r| r.received.missing() > 0))
            .count(),
        all_playing_s,
    };
    println!(
        "hot stream: {} viewers, origin {} (share {}), {} nodes, relay fan-out {}; all playing {:.1} s after the burst",
        report.viewers,
        report.origin,
        report.origin_share,
        report.nodes,
        report.relay_fanout,
        report.all_playing_s
    );
    println!(
        "{:>8} | {:>7} {:>8} | {:>6} | {:>12} {:>11} {:>11} | {:>9} | {:>7}",
        "node",
        "viewers",
        "sessions",
        "cores",
        "relay out/s",
        "relay in/s",
        "relay on/s",
        "redirects",
        "fed by"
    );
    for n in &report.per_node {
        println!(
            "{:>8} | {:>7} {:>8} | {:>6.2} | {:>12.0} {:>11.0} {:>11.0} | {:>9.0} | {:>7}",
            n.node,
            n.viewers,
            n.sessions,
            n.cpu_cores,
            n.relay_out_pps,
            n.relay_in_pps,
            n.relay_on_pps,
            n.relay_redirects,
            n.fed_by.as_deref().unwrap_or("-")
        );
    }
    println!(
        "max/mean sessions {:.2}; per viewer video pps min {:.0} median {:.0}; latency p50 {} µs p99 {} µs; viewers missing packets {}",
        report.max_over_mean,
        report.viewer_pps_min,
        report.viewer_pps_median,
        report.latency_p50_us.unwrap_or(0),
        report.latency_p99_us.unwrap_or(0),
        report.viewers_missing
    );
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", args.out.display());
    for v in viewers {
        v.close().await;
    }
    publisher.close().await;
    Ok(())
}

/// `GET /v1/streams`' entry for `stream` (null when absent).
async fn stream_entry(gateway: &str, stream: &str) -> Result<Value> {
    let url = format!("{gateway}/v1/streams");
    let list = tokio::task::spawn_blocking(move || get_json(&url)).await??;
    Ok(list
        .as_array()
        .and_then(|a| a.iter().find(|s| s["stream"] == stream))
        .cloned()
        .unwrap_or_default())
}

/// A node's relay counters: (packets relayed out, packets received from relays, packets relayed
/// on from a relay, subscribers redirected).
async fn metrics(http: &str) -> Result<(f64, f64, f64, f64)> {
    let url = format!("{http}/metrics");
    let text = tokio::task::spawn_blocking(move || -> Result<String> {
        Ok(ureq::get(&url).call()?.body_mut().read_to_string()?)
    })
    .await??;
    let get = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        get("ferry_node_relay_sent_total "),
        get("ferry_node_relay_received_total "),
        get("ferry_node_relay_forwarded_total "),
        get("ferry_node_relay_redirects_total "),
    ))
}
