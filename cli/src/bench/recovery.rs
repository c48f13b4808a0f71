//! `ferry bench recovery`: how long SDK sessions take to play again after their node is
//! SIGKILLed — separate scheduler, edge and node processes, synthetic WebRTC peers that are Rust
//! SDK sessions (they recover by themselves: ICE restart where they were, then their ticket
//! through the gateway, which finds the node dead and places them on the other one).
//!
//! Two kinds of trial, `--trials` each:
//! - `viewer`: the viewer's node dies; recovery = from the kill to the first frame the viewer's
//!   new transport completes (its `reconnected` event).
//! - `publisher`: the publisher's node dies; the publisher republishes on the viewer's node and
//!   the viewer, which keeps its session and its transport, plays on; recovery = the viewer's
//!   largest gap between packets across the kill (the last packet came just before it).
//!
//! After each trial the killed node is started again.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_sfu::codec::Codec;
use serde::Serialize;

use super::cluster::{Cluster, max_gap, video_packets};
use super::process::{Clocks, wait_for};
use super::report::{percentile, write_json};
use super::sdk_peer::{self, SdkPeer};

/// Options of `ferry bench recovery`.
#[derive(clap::Args, Debug)]
pub struct RecoveryArgs {
    /// Trials of each kind (viewer's node killed, publisher's node killed).
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// Publisher video bitrate in bit/s.
    #[arg(long, default_value_t = 1_000_000)]
    bitrate: u32,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/recovery.json")]
    out: PathBuf,
}

/// A trial gives up after this.
const GIVE_UP: Duration = Duration::from_secs(15);

#[derive(Debug, Serialize)]
struct Kind {
    kind: &'static str,
    trials: usize,
    recovered: usize,
    p50_ms: f64,
    p95_ms: f64,
    max_ms: f64,
    /// Every trial's recovery time (ms).
    samples_ms: Vec<f64>,
}

fn summary(kind: &'static str, trials: usize, mut samples: Vec<f64>) -> Kind {
    samples.sort_by(f64::total_cmp);
    Kind {
        kind,
        trials,
        recovered: samples.len(),
        p50_ms: percentile(&samples, 0.5),
        p95_ms: percentile(&samples, 0.95),
        max_ms: samples.last().copied().unwrap_or(0.0),
        samples_ms: samples,
    }
}

/// A publisher on node `pub_node`, a viewer on node `view_node`, the viewer playing.
async fn pair(
    c: &Cluster,
    stream: &str,
    bitrate: u32,
    pub_node: usize,
    view_node: usize,
    seed: u64,
) -> Result<(SdkPeer, SdkPeer)> {
    let clocks = Clocks::now();
    let publisher = sdk_peer::start(
        &c.gateway,
        &c.token,
        Some(&c.node_http[pub_node]),
        stream,
        Some(Codec::Vp8),
        seed,
        bitrate,
        &clocks,
    )
    .await?;
    // The viewer's node relays the stream in once the routing table names its origin.
    let origin = super::cluster::NODE_IDS[pub_node];
    wait_for(Duration::from_secs(10), || async {
        Ok(!c.sessions_on(origin).await?.is_empty())
    })
    .await?;
    let viewer = loop {
        match sdk_peer::start(
            &c.gateway,
            &c.token,
            Some(&c.node_http[view_node]),
            stream,
            None,
            seed + 1,
            bitrate,
            &clocks,
        )
        .await
        {
            Ok(v) => break v,
            Err(e) if format!("{e:#}").contains("404") => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    };
    wait_for(Duration::from_secs(20), || async {
        Ok(video_packets(&viewer.stats().await?) > 50)
    })
    .await
    .context("the viewer does not play")?;
    Ok((publisher, viewer))
}

/// The viewer's node dies: ms from the kill to the viewer's first frame elsewhere.
async fn viewer_trial(c: &mut Cluster, bitrate: u32, n: u64) -> Result<Option<f64>> {
    let (publisher, mut viewer) = pair(c, &format!("rv{n}"), bitrate, 1, 0, 10 * n).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    c.kill_node(0);
    let at = viewer.reconnected(GIVE_UP).await;
    let ms = at.map(|t| t.saturating_duration_since(killed).as_secs_f64() * 1e3);
    if let Some(node) = viewer.node() {
        ensure!(
            node == "node-b" || at.is_none(),
            "the viewer came back on {node}"
        );
    }
    viewer.close().await;
    publisher.close().await;
    Ok(ms)
}

/// The publisher's node dies: the viewer's largest packet gap across it (ms).
async fn publisher_trial(c: &mut Cluster, bitrate: u32, n: u64) -> Result<Option<f64>> {
    let (mut publisher, viewer) = pair(c, &format!("rp{n}"), bitrate, 0, 1, 10 * n + 5).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let transports = viewer.transports().await?;
    viewer.reset_gaps().await?;
    c.kill_node(0);
    let back = publisher.reconnected(GIVE_UP).await;
    let mut ms = None;
    if back.is_some() {
        // The first frames through the new publisher reach the viewer.
        let before = video_packets(&viewer.stats().await?);
        wait_for(Duration::from_secs(5), || async {
            Ok(video_packets(&viewer.stats().await?) > before + 30)
        })
        .await?;
        let s = viewer.stats().await?;
        ensure!(
            s.connected && viewer.transports().await? == transports,
            "the viewer kept its session and transport"
        );
        ms = Some(max_gap(&s).as_secs_f64() * 1e3);
    }
    viewer.close().await;
    publisher.close().await;
    Ok(ms)
}

pub async fn recovery(args: RecoveryArgs) -> Result<()> {
    ensure!(args.trials > 0, "--trials must be at least 1");
    let mut c = Cluster::start(100, true).await?;
    let (mut viewer, mut publisher) = (Vec::new(), Vec::new());
    for n in 0..args.trials as u64 {
        let v = viewer_trial(&mut c, args.bitrate, n).await?;
        c.start_node(0)?;
        c.wait_active().await?;
        let p = publisher_trial(&mut c, args.bitrate, n).await?;
        c.start_node(0)?;
        c.wait_active().await?;
        eprintln!(
            "trial {n}: viewer's node killed → {}; publisher's node killed → {}",
            v.map_or("not recovered".into(), |ms| format!("{ms:.0} ms")),
            p.map_or("not recovered".into(), |ms| format!("{ms:.0} ms")),
        );
        viewer.extend(v);
        publisher.extend(p);
    }
    let rows = [
        summary("viewer", args.trials, viewer),
        summary("publisher", args.trials, publisher),
    ];
    println!(
        "{:>10} {:>7} {:>9} {:>8} {:>8} {:>8}",
        "node lost", "trials", "recovered", "p50 ms", "p95 ms", "max ms"
    );
    for r in &rows {
        println!(
            "{:>10} {:>7} {:>9} {:>8.0} {:>8.0} {:>8.0}",
            r.kind, r.trials, r.recovered, r.p50_ms, r.p95_ms, r.max_ms
        );
    }
    write_json(&args.out, &rows)?;
    if rows.iter().any(|r| r.recovered < r.trials) {
        bail!("some sessions did not recover");
    }
    Ok(())
}
