//! Hot migration end to end (issue 4 acceptance), in headless Chromium
//! against `ferry dev` (scheduler, node-a, node-b as real sockets and QUIC):
//! page A publishes via WHIP to node-a, B plays from node-a, C from node-b
//! (relayed from node-a). While media flows the operator API moves the
//! publisher a→b, then viewer B a→b, then both back.
//!
//! - `edge` mode (clients reach the nodes through `ferry dev`'s edge): the
//!   edge flips its route. No new freeze, no lost packet after
//!   retransmission, frames keep decoding, the same DTLS transport and no
//!   change of the selected candidate pair (the edge address never changes).
//! - `ice-restart` mode (clients reach the nodes directly): the source
//!   forwards in-flight datagrams to the target and tells the client
//!   (server-sent `migrate` event); the page restarts ICE towards the target
//!   with a PATCH. No new freeze, no lost packet, DTLS stays connected
//!   without a new handshake; the selected pair moves to the target.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_tests::cluster::{
    migration_end, open_publisher, playing, session_of, start_migration, wait_registered,
    wait_session_on,
};
use ferry_tests::{Browser, Collector, FerryProcess, Reports, http, num};
use serde_json::Value;

const SETUP: Duration = Duration::from_secs(45);

/// One scenario at a time: each runs several Chromium instances and a
/// cluster, and on two cores two of them at once starve each other (the
/// figures would then measure the machine, not Ferry).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn show(reports: &Reports, id: &str) -> String {
    reports.get(id).map_or("no report".into(), |r| {
        format!(
            "{id}: conn={} transport={} video={}",
            r["connectionState"], r["transport"], r["inbound"]["video"]
        )
    })
}

struct Dev {
    _process: FerryProcess,
    state: std::path::PathBuf,
    gateway: String,
    token: String,
    node_a: String,
    node_b: String,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

fn start_dev(edge: bool) -> Result<Dev> {
    // Each run its own state and secrets: runs of this file go in parallel.
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let state = std::env::temp_dir().join(format!(
        "ferry-dev-test-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let state_arg = state.to_str().context("temp dir")?.to_owned();
    let mut args = vec![
        "dev",
        "--state-dir",
        state_arg.as_str(),
        "--gateway",
        "127.0.0.1:0",
        "--node-a",
        "127.0.0.1:0",
        "--node-b",
        "127.0.0.1:0",
        "--edge",
        "127.0.0.1:0",
    ];
    if !edge {
        args.push("--no-edge");
    }
    let process = FerryProcess::spawn(&args)?;
    Ok(Dev {
        state,
        gateway: process.after("gateway")?,
        token: process.after("token")?,
        node_a: process.after("node-a")?,
        node_b: process.after("node-b")?,
        _process: process,
    })
}

/// `POST /v1/migrations` and follow it until it ends; the view at the end,
/// which must be `committed`.
async fn migrate(dev: &Dev, session: &str, target: &str, mode: &str) -> Result<Value> {
    let id = start_migration(&dev.gateway, &dev.token, session, target, mode)?;
    let v = migration_end(&dev.gateway, &id).await?;
    if v["state"] != "committed" {
        bail!("migration {id} ended {}: {v}", v["state"]);
    }
    Ok(v)
}

async fn run(codec: &str, mime: &str, mode: &str) -> Result<()> {
    let edge = mode == "edge";
    let follow = if edge { "0" } else { "1" };
    let dev = start_dev(edge)?;
    eprintln!(
        "{codec} {mode}: node-a {} node-b {}",
        dev.node_a, dev.node_b
    );
    wait_registered(&dev.gateway, 2).await?;
    let collector = Collector::start()?;
    let stream = format!("mig-{codec}");
    let whip = format!("{}/whip/{stream}", dev.node_a);
    let _a = open_publisher(&collector, &whip, codec, "A", &[("follow", follow)], SETUP).await?;
    let publisher = session_of(&collector.reports()["A"])?;
    // node-b finds the stream's origin in the routing table (heartbeats).
    wait_session_on(&dev.gateway, &publisher, "node-a").await?;
    let _b = Browser::open(&collector.page_url(
        "view.html",
        &[
            ("whep", &format!("{}/whep/{stream}", dev.node_a)),
            ("id", "B"),
            ("follow", follow),
        ],
    ))?;
    let _c = Browser::open(&collector.page_url(
        "view.html",
        &[
            ("whep", &format!("{}/whep/{stream}", dev.node_b)),
            ("id", "C"),
            ("follow", follow),
        ],
    ))?;
    if let Err(e) = collector
        .wait_until(SETUP, |r| {
            ["B", "C"].iter().all(|id| r.get(*id).is_some_and(playing))
        })
        .await
    {
        for n in [&dev.node_a, &dev.node_b] {
            let m = http(&format!("{n}/metrics"), "GET", &[], b"")?.body;
            let relay: Vec<&str> = m
                .lines()
                .filter(|l| l.contains("relay") || l.contains("tunnel"))
                .collect();
            eprintln!("{n}: {relay:?}");
        }
        let r = http(&format!("{}/v1/routing", dev.gateway), "GET", &[], b"")?;
        eprintln!("routing: {}", r.body);
        return Err(e);
    }
    let viewer_b = session_of(&collector.reports()["B"])?;
    // Let playback settle (first keyframe, jitter buffer) before the baseline.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let start = collector.reports();

    let mut views = Vec::new();
    for (session, target) in [
        (&publisher, "node-b"),
        (&viewer_b, "node-b"),
        (&publisher, "node-a"),
        (&viewer_b, "node-a"),
    ] {
        let t = Instant::now();
        let v = migrate(&dev, session, target, mode).await?;
        eprintln!(
            "{codec} {mode}: {session} → {target} in {:?}: phases {} blackout {} ms bytes {}",
            t.elapsed(),
            v["phases_ms"],
            v["blackout_ms"],
            v["bytes"]
        );
        views.push(v);
        wait_session_on(&dev.gateway, session, target).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end = collector.reports();
    eprintln!("{codec}:\n  {}\n  {}", show(&end, "B"), show(&end, "C"));

    if !edge {
        // Every move of A and B was followed by an ICE restart at the target.
        for (id, key, moves) in [("A", "whip", 2), ("B", "whep", 2)] {
            let m = &end[id][key]["migrations"];
            let ok = m
                .as_array()
                .map_or(0, |m| m.iter().filter(|x| x["status"] == 200).count());
            eprintln!("{codec} {id}: ICE restarts {m}");
            if ok != moves {
                for n in [&dev.node_a, &dev.node_b] {
                    eprintln!(
                        "{n}: {}",
                        http(&format!("{n}/v1/sessions"), "GET", &[], b"")?.body
                    );
                }
                eprintln!("{id} events: {}", end[id]["events"]);
            }
            ensure!(
                ok == moves,
                "{id}: {ok} of {moves} ICE restarts succeeded: {m}"
            );
        }
    }
    for id in ["B", "C"] {
        let (s, e) = (&start[id], &end[id]);
        ensure!(
            e["inbound"]["video"]["codec"] == mime,
            "{id} plays {}",
            e["inbound"]["video"]["codec"]
        );
        let delta = |p: &str| num(e, p) - num(s, p);
        let decoded = delta("/inbound/video/framesDecoded");
        ensure!(
            decoded > 200.0,
            "{id} decoded only {decoded} frames: {}",
            show(&end, id)
        );
        ensure!(
            delta("/inbound/video/freezeCount") == 0.0
                && delta("/inbound/video/totalFreezesDuration") == 0.0,
            "{id} froze during the migrations: {}",
            show(&end, id)
        );
        ensure!(
            delta("/inbound/video/packetsLost") <= 0.0,
            "{id} lost video packets: {}",
            show(&end, id)
        );
        ensure!(
            delta("/inbound/audio/packetsReceived") > 0.0,
            "{id} gets no audio: {}",
            show(&end, id)
        );
        ensure!(
            e["transport"]["dtlsState"] == "connected",
            "{id}: DTLS is {}",
            e["transport"]["dtlsState"]
        );
        if edge {
            ensure!(
                s["transport"]["selectedCandidatePairId"]
                    == e["transport"]["selectedCandidatePairId"]
                    && s["transport"]["selectedCandidatePairChanges"]
                        == e["transport"]["selectedCandidatePairChanges"],
                "{id}: the transport changed: {} → {}",
                s["transport"],
                e["transport"]
            );
        }
        let dtls_again = e["events"]
            .as_array()
            .is_some_and(|ev| ev.iter().filter(|x| x["what"] == "dtls connecting").count() > 1);
        ensure!(!dtls_again, "{id}: a new DTLS handshake: {}", e["events"]);
        eprintln!(
            "{codec} {id}: {decoded} frames, freezes {} ({} s), packetsLost video {} → {}, nack {}",
            e["inbound"]["video"]["freezeCount"],
            e["inbound"]["video"]["totalFreezesDuration"],
            s["inbound"]["video"]["packetsLost"],
            e["inbound"]["video"]["packetsLost"],
            e["inbound"]["video"]["nackCount"]
        );
    }
    let a = &end["A"];
    ensure!(
        a["connectionState"] == "connected"
            && (!edge
                || start["A"]["transport"]["selectedCandidatePairChanges"]
                    == a["transport"]["selectedCandidatePairChanges"]),
        "the publisher's transport changed: {}",
        a["transport"]
    );
    // The nodes count what they did.
    let m = http(&format!("{}/metrics", dev.node_a), "GET", &[], b"")?.body;
    ensure!(
        m.contains("ferry_migrations_total{role=\"source\",outcome=\"committed\"} 2"),
        "node-a metrics:\n{m}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_and_viewer_migrate_and_back_in_edge_mode_vp8_then_h264() -> Result<()> {
    let _serial = SERIAL.lock().await;
    run("vp8", "video/VP8", "edge").await?;
    run("h264", "video/H264", "edge").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_and_viewer_migrate_and_back_in_ice_restart_mode_vp8_then_h264() -> Result<()> {
    let _serial = SERIAL.lock().await;
    run("vp8", "video/VP8", "ice-restart").await?;
    run("h264", "video/H264", "ice-restart").await?;
    Ok(())
}

/// `reconnect` mode: viewer B moves a→b; its page opens a new
/// PeerConnection to node-b with the ticket from the `migrate` event. The
/// session keeps its id and the new connection decodes within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reconnects_with_a_ticket_and_decodes_within_a_second() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let dev = start_dev(false)?;
    wait_registered(&dev.gateway, 2).await?;
    let collector = Collector::start()?;
    let stream = "mig-reconnect";
    let whip = format!("{}/whip/{stream}", dev.node_a);
    let _a = open_publisher(&collector, &whip, "vp8", "A", &[], SETUP).await?;
    let publisher = session_of(&collector.reports()["A"])?;
    wait_session_on(&dev.gateway, &publisher, "node-a").await?;
    let _b = Browser::open(&collector.page_url(
        "reconnect.html",
        &[
            ("whep", &format!("{}/whep/{stream}", dev.node_a)),
            ("id", "B"),
        ],
    ))?;
    collector
        .wait_until(SETUP, |r| r.get("B").is_some_and(playing))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let viewer = collector.reports()["B"]["session"]
        .as_str()
        .context("B's session")?
        .to_owned();
    let v = migrate(&dev, &viewer, "node-b", "reconnect").await?;
    eprintln!("reconnect migration: {v}");
    let reports = collector
        .wait_until(Duration::from_secs(15), |r| {
            r.get("B").is_some_and(|b| {
                b["reconnects"].as_array().is_some_and(|x| {
                    x.iter()
                        .any(|o| o["eventToFirstFrameMs"].is_number() || o["error"].is_string())
                })
            })
        })
        .await?;
    let o = &reports["B"]["reconnects"][0];
    eprintln!("B reconnect: {o}");
    ensure!(o["error"].is_null(), "reconnect failed: {o}");
    ensure!(o["status"] == 201 && o["sameSession"] == true, "{o}");
    let ms = o["eventToFirstFrameMs"].as_f64().unwrap_or(f64::MAX);
    ensure!(
        ms < 1000.0,
        "first frame on node-b {ms} ms after the migrate event"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = num(&collector.reports()["B"], "/inbound/video/framesDecoded");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = collector.reports();
    ensure!(
        num(&after["B"], "/inbound/video/framesDecoded") > before + 30.0,
        "B plays on from node-b: {}",
        after["B"]["inbound"]["video"]
    );
    let on_b = http(&format!("{}/v1/sessions", dev.node_b), "GET", &[], b"")?.body;
    ensure!(
        on_b.contains(&viewer),
        "the session keeps its id on node-b: {on_b}"
    );
    let m = http(&format!("{}/metrics", dev.node_b), "GET", &[], b"")?.body;
    eprintln!(
        "node-b: {}",
        m.lines()
            .filter(|l| l.starts_with("ferry_node_sessions_"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
