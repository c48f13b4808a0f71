//! Crashes during migration, with each component its own process
//! (`ferry scheduler`, `ferry edge`, two `ferry node`s sharing one cluster
//! secrets directory) and Chromium publishing and playing through the edge:
//!
//! - the target node is SIGKILLed while the publisher's migration runs: the
//!   migration does not commit and the session plays on from the source;
//! - the source node is SIGKILLed right after the publisher and the viewer
//!   moved off it: both play on from the target without a freeze.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ferry_tests::{Browser, Collector, FerryProcess, Reports, http, num};
use serde_json::Value;

const SETUP: Duration = Duration::from_secs(45);

/// One scenario at a time: each runs several Chromium instances and a
/// cluster, and on two cores two of them at once starve each other (the
/// figures would then measure the machine, not Ferry).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Cluster {
    _scheduler: FerryProcess,
    _edge: FerryProcess,
    a: FerryProcess,
    b: FerryProcess,
    gateway: String,
    token: String,
    node_a: String,
    node_b: String,
    dir: std::path::PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_cluster() -> Result<Cluster> {
    let dir = std::env::temp_dir().join(format!("ferry-crash-{}", std::process::id()));
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
    let edge = FerryProcess::spawn(&["edge", "--udp", "127.0.0.1:0", "--cluster-dir", d])?;
    let edge_udp = edge.after("udp")?;
    let node = |id: &str| {
        FerryProcess::spawn(&[
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
        ])
    };
    let a = node("node-a")?;
    let b = node("node-b")?;
    Ok(Cluster {
        node_a: a.after("http")?,
        node_b: b.after("http")?,
        _scheduler: scheduler,
        _edge: edge,
        a,
        b,
        gateway,
        token,
        dir,
    })
}

async fn wait_registered(c: &Cluster) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = http(&format!("{}/v1/nodes", c.gateway), "GET", &[], b"")?;
        let nodes: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if nodes.as_array().is_some_and(|n| {
            n.len() == 2
                && n.iter().all(|n| {
                    n["state"] == "active" && n["migration"].as_str().is_some_and(|m| !m.is_empty())
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

fn start_migration(c: &Cluster, session: &str, target: &str) -> Result<String> {
    let auth = format!("Bearer {}", c.token);
    let body = serde_json::json!({ "session": session, "target": target, "mode": "edge" });
    let r = http(
        &format!("{}/v1/migrations", c.gateway),
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

/// Follows a migration until it ends; its final view.
async fn finished(c: &Cluster, id: &str) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http(
            &format!("{}/v1/migrations/{id}", c.gateway),
            "GET",
            &[],
            b"",
        )?;
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

fn session_of(r: &Value) -> Result<String> {
    let loc = r["whip"]["location"]
        .as_str()
        .or_else(|| r["whep"]["location"].as_str())
        .context("no Location in the report")?;
    Ok(loc.rsplit('/').next().unwrap_or_default().to_owned())
}

fn playing(r: &Value) -> bool {
    r["connectionState"] == "connected" && num(r, "/inbound/video/framesDecoded") > 0.0
}

fn sessions_on(node_http: &str) -> Result<String> {
    Ok(http(&format!("{node_http}/v1/sessions"), "GET", &[], b"")?.body)
}

/// A publishes to node-a through the edge, B plays from node-a.
struct Pages {
    _a: Browser,
    _b: Browser,
    publisher: String,
    viewer: String,
}

async fn open_pages(c: &Cluster, collector: &Collector) -> Result<Pages> {
    let stream = "crash";
    let a = Browser::open(&collector.page_url(
        "publish.html",
        &[
            ("whip", &format!("{}/whip/{stream}", c.node_a)),
            ("codec", "vp8"),
            ("audio", "1"),
            ("id", "A"),
        ],
    ))?;
    collector
        .wait_until(SETUP, |r| {
            r.get("A").is_some_and(|a| {
                a["connectionState"] == "connected" && num(a, "/outbound/video/framesEncoded") > 0.0
            })
        })
        .await?;
    let b = Browser::open(&collector.page_url(
        "view.html",
        &[
            ("whep", &format!("{}/whep/{stream}", c.node_a)),
            ("id", "B"),
        ],
    ))?;
    collector
        .wait_until(SETUP, |r| r.get("B").is_some_and(playing))
        .await?;
    let reports = collector.reports();
    // Let playback settle before the baseline.
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok(Pages {
        publisher: session_of(&reports["A"])?,
        viewer: session_of(&reports["B"])?,
        _a: a,
        _b: b,
    })
}

fn delta(s: &Reports, e: &Reports, id: &str, p: &str) -> f64 {
    num(&e[id], p) - num(&s[id], p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_target_mid_migration_leaves_the_session_on_the_source() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = start_cluster()?;
    wait_registered(&c).await?;
    let collector = Collector::start()?;
    let pages = open_pages(&c, &collector).await?;
    let start = collector.reports();
    let id = start_migration(&c, &pages.publisher, "node-b")?;
    // Kill the target once it holds the imported (not yet active) session:
    // the snapshot arrived, the cutover has not happened.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !sessions_on(&c.node_b)?.contains(&pages.publisher) {
        ensure!(
            Instant::now() < deadline,
            "the target never imported the session"
        );
    }
    c.b.kill();
    let t = Instant::now();
    let v = finished(&c, &id).await?;
    eprintln!(
        "migration after SIGKILL of the target: {v} ({:?})",
        t.elapsed()
    );
    ensure!(
        v["state"] != "committed",
        "the migration committed to a dead node: {v}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let end = collector.reports();
    ensure!(
        sessions_on(&c.node_a)?.contains(&pages.publisher),
        "the publisher is still on node-a"
    );
    let decoded = delta(&start, &end, "B", "/inbound/video/framesDecoded");
    eprintln!(
        "B after rollback: {decoded} frames decoded, freezes +{} ({} s), packetsLost +{}",
        delta(&start, &end, "B", "/inbound/video/freezeCount"),
        delta(&start, &end, "B", "/inbound/video/totalFreezesDuration"),
        delta(&start, &end, "B", "/inbound/video/packetsLost"),
    );
    ensure!(
        end["B"]["connectionState"] == "connected",
        "B: {}",
        end["B"]["connectionState"]
    );
    ensure!(
        decoded > 60.0,
        "B keeps playing from the source: {decoded} frames"
    );
    let before = num(&end["B"], "/inbound/video/framesDecoded");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = collector.reports();
    ensure!(
        num(&later["B"], "/inbound/video/framesDecoded") > before + 20.0,
        "B is still decoding"
    );
    ensure!(
        delta(&start, &later, "B", "/inbound/video/packetsLost") <= 0.0,
        "B lost packets"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_source_after_cutover_leaves_the_sessions_on_the_target() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = start_cluster()?;
    wait_registered(&c).await?;
    let collector = Collector::start()?;
    let pages = open_pages(&c, &collector).await?;
    let start = collector.reports();
    for session in [&pages.publisher, &pages.viewer] {
        let id = start_migration(&c, session, "node-b")?;
        let v = finished(&c, &id).await?;
        ensure!(v["state"] == "committed", "{v}");
    }
    c.a.kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let end = collector.reports();
    let on_b = sessions_on(&c.node_b)?;
    ensure!(
        on_b.contains(&pages.publisher) && on_b.contains(&pages.viewer),
        "both sessions on node-b: {on_b}"
    );
    let decoded = delta(&start, &end, "B", "/inbound/video/framesDecoded");
    eprintln!(
        "B with node-a dead: {decoded} frames decoded, freezes +{} ({} s), packetsLost +{}",
        delta(&start, &end, "B", "/inbound/video/freezeCount"),
        delta(&start, &end, "B", "/inbound/video/totalFreezesDuration"),
        delta(&start, &end, "B", "/inbound/video/packetsLost"),
    );
    ensure!(
        end["B"]["connectionState"] == "connected",
        "B: {}",
        end["B"]["connectionState"]
    );
    ensure!(
        end["A"]["connectionState"] == "connected",
        "A: {}",
        end["A"]["connectionState"]
    );
    ensure!(
        decoded > 100.0,
        "B keeps playing from node-b: {decoded} frames"
    );
    ensure!(
        delta(&start, &end, "B", "/inbound/video/freezeCount") == 0.0
            && delta(&start, &end, "B", "/inbound/video/packetsLost") <= 0.0,
        "B froze or lost packets: {}",
        end["B"]["inbound"]["video"]
    );
    Ok(())
}
