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
use serde::Serialize;
use serde_json::Value;

use super::cluster::{
    Cluster, get_json, max_gap, post_json, start_media, stats, video_missing, video_packets,
};
use super::process::wait_for;
use super::report::{percentile, write_json};
use super::sdk_peer::SdkPeer;

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
