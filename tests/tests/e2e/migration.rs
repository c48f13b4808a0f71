//! Hot migration end to end with the browser SDK (issues 4 and 8), in headless Chromium against
//! `ferry dev` (scheduler, node-a, node-b as real sockets and QUIC): page A publishes to
//! node-a, B plays from node-a, C from node-b (relayed from node-a), each with the browser SDK
//! (`/sdk/ferry.js`). While media flows the operator API moves the publisher a→b, viewer B
//! a→b, viewer C b→a, then all three back; the pages do nothing but let the SDK follow.
//!
//! - `edge` mode (clients reach the nodes through `ferry dev`'s edge): the edge flips its
//!   route; the SDK follows the session's URL. No freeze, no lost packet after retransmission,
//!   frames shown at most 100 ms apart around each migration (a stall between migrations is the
//!   machine's: reported, at most 1 s, and on a machine that stalls longer than 100 ms between
//!   migrations the bound; a gap whose frame came in time one frame after the one before is the
//!   renderer's, `Gaps`), the same DTLS transport and selected candidate pair.
//! - `ice-restart` mode (clients reach the nodes directly): the source forwards in-flight
//!   datagrams to the target and tells the client (server-sent `migrate` event); the SDK
//!   restarts ICE towards the target by PATCH. The same, and no new DTLS handshake.
//! - `reconnect` mode, publisher too: the SDK opens a new RTCPeerConnection to the target with
//!   the event's ticket; the session keeps its id, viewers of a reconnected publisher switch to
//!   its new source at a keyframe. Frames at most 1 s apart, no freeze, nothing lost.
//!
//! Every page's SDK reports each move with a `migrated` event carrying the blackout it saw.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_tests::cluster::{
    Dev, migration_end, start_dev, start_migration, wait_registered, wait_session_on,
};
use ferry_tests::{Browser, Collector, LossCounters, Reports, http, num};
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

/// Wall clock in ms since the epoch (the pages' `Date.now()`).
fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// A migration's gaps are those that overlap its run or the next `AFTER_MIGRATION_MS` (a
/// viewer's video can only stall on it then).
const AFTER_MIGRATION_MS: f64 = 700.0;

/// How far apart Chrome's fake camera captures frames (30 fps).
const FRAME_MS: f64 = 1000.0 / 30.0;

/// A page's presented-video gaps (over 80 ms) against the migrations' windows (ms since the
/// epoch).
struct Gaps {
    /// The largest gap in a migration window, but for the renderer's (below).
    during: f64,
    /// The gaps in no migration window: the machine's stalls.
    outside: Vec<f64>,
    /// Gaps in a window that were the renderer's: the frame that ended it was captured one frame
    /// after the one before and arrived in time, yet was shown late (a migration that held
    /// media back would have made it late). Where frames were skipped the page cannot tell a
    /// migration's burst from a starved renderer's drops: such a gap counts in `during`.
    renderer_during: Vec<f64>,
}

/// A frame arriving this much later than its capture spacing is on time (the network thread's
/// own jitter under load: ±7 ms measured here).
const ON_TIME_MS: f64 = 20.0;

fn migration_gaps(report: &Value, windows: &[(u128, u128)]) -> Gaps {
    let mut gaps = Gaps {
        during: 0.0,
        outside: Vec::new(),
        renderer_during: Vec::new(),
    };
    for g in report["frames"]["gaps"].as_array().into_iter().flatten() {
        let (at, ms) = (num(g, "/at"), num(g, "/ms"));
        let overlaps = windows
            .iter()
            .any(|&(start, end)| at >= start as f64 && at - ms <= end as f64 + AFTER_MIGRATION_MS);
        if !overlaps {
            gaps.outside.push(ms);
            continue;
        }
        let renderer = match (g["captured"].as_f64(), g["late"].as_f64()) {
            (Some(captured), Some(late)) => captured <= 1.5 * FRAME_MS && late <= ON_TIME_MS,
            _ => false,
        };
        if renderer {
            gaps.renderer_during.push(ms);
        } else {
            gaps.during = gaps.during.max(ms);
        }
    }
    gaps
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

/// Opens a browser-SDK page (`sdk-play.html` or `sdk-publish.html`) through the gateway, its
/// first offer straight to `node`.
fn sdk_page(
    collector: &Collector,
    dev: &Dev,
    page: &str,
    id: &str,
    node: &str,
    stream: &str,
    codec: &str,
) -> Result<Browser> {
    let kind = if page.contains("publish") {
        "whip"
    } else {
        "whep"
    };
    Browser::open(&collector.page_url(
        page,
        &[
            ("sdk", &dev.gateway),
            ("base", &dev.gateway),
            ("endpoint", &format!("{node}/{kind}/{stream}")),
            ("stream", stream),
            ("codec", codec),
            ("id", id),
            ("token", &dev.token),
        ],
    ))
}

/// A page's SDK session is up and (a player) its video plays.
fn live(r: &Value) -> bool {
    r["session"].is_string()
        && matches!(r["state"].as_str(), Some("connected"))
        && (r["phase"] == "publishing" || num(r, "/frames/count") > 10.0)
}

async fn run(codec: &str, mime: &str, mode: &str) -> Result<()> {
    let edge = mode == "edge";
    let dev = start_dev(edge)?;
    eprintln!(
        "{codec} {mode}: node-a {} node-b {}",
        dev.node_a, dev.node_b
    );
    wait_registered(&dev.gateway, 2).await?;
    let collector = Collector::start()?;
    let stream = format!("mig-{codec}-{mode}");
    // A publishes to node-a; B plays from node-a, C from node-b (relayed). Every page follows
    // its session's migrations through the browser SDK, whatever the mode.
    let _a = sdk_page(
        &collector,
        &dev,
        "sdk-publish.html",
        "A",
        &dev.node_a,
        &stream,
        codec,
    )?;
    collector
        .wait_until(SETUP, |r| r.get("A").is_some_and(live))
        .await?;
    let publisher = collector.reports()["A"]["session"]
        .as_str()
        .context("A's session")?
        .to_owned();
    // node-b finds the stream's origin in the routing table (heartbeats).
    wait_session_on(&dev.gateway, &publisher, "node-a").await?;
    let _b = sdk_page(
        &collector,
        &dev,
        "sdk-play.html",
        "B",
        &dev.node_a,
        &stream,
        codec,
    )?;
    let _c = sdk_page(
        &collector,
        &dev,
        "sdk-play.html",
        "C",
        &dev.node_b,
        &stream,
        codec,
    )?;
    if let Err(e) = collector
        .wait_until(SETUP, |r| {
            ["B", "C"].iter().all(|id| r.get(*id).is_some_and(live))
        })
        .await
    {
        let r = http(&format!("{}/v1/routing", dev.gateway), "GET", &[], b"")?;
        eprintln!("routing: {}", r.body);
        return Err(e);
    }
    let id_of = |r: &Reports, p: &str| -> Result<String> {
        Ok(r[p]["session"].as_str().context("session id")?.to_owned())
    };
    let first = collector.reports();
    let (viewer_b, viewer_c) = (id_of(&first, "B")?, id_of(&first, "C")?);
    // Let playback settle (first keyframe, jitter buffer) before the baseline.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reset_at = unix_ms() as f64;
    for p in ["B", "C"] {
        collector.command(p, "resetGap");
    }
    // The baseline is a report made after the reset had reached the pages (they poll for
    // commands every 250 ms and report every second): its totals and the gaps then count
    // from the same moment.
    collector
        .wait_until(SETUP, |r| {
            ["B", "C"].iter().all(|id| {
                r.get(*id)
                    .and_then(|x| x["frames"]["times"].as_array()?.last()?.as_f64())
                    .is_some_and(|t| t > reset_at + 600.0)
            })
        })
        .await?;
    let start = collector.reports();
    let bases = [
        ("gateway", dev.gateway.as_str()),
        ("node-a", dev.node_a.as_str()),
        ("node-b", dev.node_b.as_str()),
    ];
    let counters = LossCounters::read(&bases);
    // The viewers' packetsLost after each move, to tell which move a loss came with.
    let mut lost_after = Vec::new();

    let mut views = Vec::new();
    // When each migration ran (ms since the epoch), to tell its gaps from the machine's.
    let mut windows = Vec::new();
    for (session, target) in [
        (&publisher, "node-b"),
        (&viewer_b, "node-b"),
        (&viewer_c, "node-a"),
        (&publisher, "node-a"),
        (&viewer_b, "node-a"),
        (&viewer_c, "node-b"),
    ] {
        let t = Instant::now();
        let at = unix_ms();
        let v = migrate(&dev, session, target, mode).await?;
        windows.push((at, unix_ms()));
        eprintln!(
            "{codec} {mode}: {session} → {target} at {at} in {:?}: phases {} blackout {} ms bytes {}",
            t.elapsed(),
            v["phases_ms"],
            v["blackout_ms"],
            v["bytes"]
        );
        views.push(v);
        wait_session_on(&dev.gateway, session, target).await?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let r = collector.reports();
        lost_after.push(format!(
            "{session} → {target}: B {} C {}",
            num(&r["B"], "/totals/packetsLost"),
            num(&r["C"], "/totals/packetsLost")
        ));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end = collector.reports();
    eprintln!(
        "{codec} {mode}:\n  {}\n  {}",
        show(&end, "B"),
        show(&end, "C")
    );

    // Every page followed each of its session's moves, and says what it saw.
    let max_gap: f64 = if mode == "reconnect" { 1000.0 } else { 100.0 };
    for id in ["A", "B", "C"] {
        let (s, e) = (&start[id], &end[id]);
        let moved = e["migrated"].as_array().map_or(0, Vec::len);
        eprintln!("{codec} {mode} {id}: migrated {}", e["migrated"]);
        ensure!(
            moved == 2
                && e["migrated"].as_array().is_some_and(|m| m
                    .iter()
                    .all(|x| x["mode"] == mode && x["blackoutMs"].is_number())),
            "{id}: {moved} `migrated` events (2 expected, with their blackout): {}\n{}",
            e["migrated"],
            e["sdk"]
        );
        ensure!(
            e["sdkErrors"].as_array().is_some_and(Vec::is_empty)
                && e["errors"].as_array().is_some_and(Vec::is_empty),
            "{id}: errors: {} {}",
            e["sdkErrors"],
            e["errors"]
        );
        ensure!(e["state"] == "connected", "{id} is {}", e["state"]);
        ensure!(
            e["session"] == s["session"],
            "{id} kept its session id: {} → {}",
            s["session"],
            e["session"]
        );
        if id == "A" {
            continue;
        }
        ensure!(
            e["inbound"]["video"]["codec"] == mime,
            "{id} plays {}",
            e["inbound"]["video"]["codec"]
        );
        let delta = |p: &str| num(e, p) - num(s, p);
        let shown = delta("/frames/count");
        ensure!(
            shown > 300.0,
            "{id} showed only {shown} frames: {}",
            show(&end, id)
        );
        let Gaps {
            during: gap,
            outside: stalls,
            renderer_during,
        } = migration_gaps(e, &windows);
        eprintln!(
            "{codec} {mode} {id}: gaps over 80 ms {}; outside the migrations {stalls:?}; in them, \
             the renderer's {renderer_during:?}",
            e["frames"]["gaps"]
        );
        // A migration stalls the video no longer than the mode's bound, or than the machine
        // itself did between migrations: a loaded machine's nodes and browsers starve too, and
        // the test cannot see finer than that.
        let stall = stalls.iter().copied().fold(0.0, f64::max);
        let bound = max_gap.max(stall.min(1000.0));
        ensure!(
            gap <= bound,
            "{id}: the video stood still for {gap} ms during a migration (≤ {max_gap} ms in \
             {mode} mode, or the {stall} ms it stood still between migrations); gaps over 80 \
             ms ({{at, ms, captured, late}}): {}",
            e["frames"]["gaps"]
        );
        // Between migrations nothing moves: a stall there is the machine's (two cores, three
        // browsers), but the video never stops.
        ensure!(
            stall <= 1000.0,
            "{id}: the video stood still for {stall} ms between migrations"
        );
        // Edge and ICE-restart moves keep the transport: no freeze at all. A
        // reconnect builds a new one, so each of the four cutovers this viewer
        // sees (two of its own, two of its publisher's) may exceed Chrome's
        // freeze threshold (~180 ms at 30 fps), all of them together within the
        // mode's budget.
        let (freezes, frozen_ms) = (
            delta("/totals/freezeCount"),
            delta("/totals/totalFreezesDuration") * 1000.0,
        );
        // A freeze Chrome counts needs a gap of ~150 ms or more; those of the machine's stalls
        // (between migrations, or the renderer's in one) are not the migrations'.
        let machine: Vec<f64> = stalls
            .iter()
            .chain(&renderer_during)
            .copied()
            .filter(|ms| *ms >= 150.0)
            .collect();
        let (max_freezes, max_frozen_ms) = if mode == "reconnect" {
            (4.0, max_gap)
        } else {
            (0.0, 0.0)
        };
        let (max_freezes, max_frozen_ms) = (
            max_freezes + machine.len() as f64,
            max_frozen_ms + machine.iter().sum::<f64>(),
        );
        ensure!(
            freezes <= max_freezes && frozen_ms <= max_frozen_ms,
            "{id} froze during the migrations ({freezes} freezes, {frozen_ms} ms; \
             ≤ {max_freezes} and {max_frozen_ms} ms in {mode} mode): {}",
            e["totals"]
        );
        ensure!(
            delta("/totals/packetsLost") <= 0.0,
            "{id} lost video packets: {}\npacketsLost from B {} C {}, after each move:\n{}\nloss counters that grew:\n{}",
            e["totals"],
            num(&start["B"], "/totals/packetsLost"),
            num(&start["C"], "/totals/packetsLost"),
            lost_after.join("\n"),
            LossCounters::read(&bases).since(&counters)
        );
        ensure!(
            num(e, "/frames/tsRegressions") == 0.0,
            "{id}: RTP timestamps went backwards: {}\n{}",
            e["frames"]["regressions"],
            e["sdk"]
        );
        ensure!(
            num(e, "/inbound/audio/packetsReceived") > 0.0,
            "{id} gets no audio: {}",
            show(&end, id)
        );
        ensure!(
            e["dtlsState"] == "connected",
            "{id}: DTLS is {}",
            e["dtlsState"]
        );
        if mode != "reconnect" {
            ensure!(
                e["totals"]["transports"] == 1,
                "{id} kept its one RTCPeerConnection: {}",
                e["totals"]
            );
            let dtls_again = e["events"]
                .as_array()
                .is_some_and(|ev| ev.iter().filter(|x| x["what"] == "dtls connecting").count() > 1);
            ensure!(!dtls_again, "{id}: a new DTLS handshake: {}", e["events"]);
        }
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
        eprintln!(
            "{codec} {mode} {id}: {shown} frames shown, largest gap {gap} ms, freezes {}, packetsLost {}, transports {}",
            e["totals"]["freezeCount"], e["totals"]["packetsLost"], e["totals"]["transports"]
        );
    }
    // The nodes count what they did.
    let m = http(&format!("{}/metrics", dev.node_a), "GET", &[], b"")?.body;
    ensure!(
        m.contains("ferry_migrations_total{role=\"source\",outcome=\"committed\"} 3"),
        "node-a metrics:\n{m}"
    );
    // The clients' datagrams all reached a session: none came from an address the node did not
    // know (an ICE restart's new path carries media before the check that nominates it).
    if mode != "reconnect" {
        for node in [&dev.node_a, &dev.node_b] {
            let m = http(&format!("{node}/metrics"), "GET", &[], b"")?.body;
            ensure!(
                m.contains("ferry_node_dropped_unknown_source_total 0"),
                "{node} dropped client datagrams from unknown addresses:\n{}",
                m.lines()
                    .filter(|l| l.contains("dropped"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_sessions_migrate_and_back_in_edge_mode_vp8_then_h264() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    run("vp8", "video/VP8", "edge").await?;
    run("h264", "video/H264", "edge").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_sessions_migrate_and_back_in_ice_restart_mode_vp8_then_h264() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    run("vp8", "video/VP8", "ice-restart").await?;
    run("h264", "video/H264", "ice-restart").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_sessions_reconnect_with_tickets_and_back_vp8_then_h264() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    run("vp8", "video/VP8", "reconnect").await?;
    run("h264", "video/H264", "reconnect").await?;
    Ok(())
}
