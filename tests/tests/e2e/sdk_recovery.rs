//! Node crashes under browser-SDK sessions (issue 8): a cluster of separate processes
//! (`ferry scheduler`, `ferry edge`, two `ferry node`s) and Chromium pages that publish and play
//! with the browser SDK and contain no recovery code at all.
//!
//! - The node serving a viewer is SIGKILLed: the SDK notices (its event stream drops, the node
//!   does not answer), restarts ICE where it was (refused), then POSTs its ticket through the
//!   gateway, which finds the node dead and places the session on the other node: the same
//!   session plays there within 2 s of the kill.
//! - The node of the publisher is SIGKILLed: the publisher's SDK republishes the same way; the
//!   viewer on the surviving node keeps its session (no reconnect at all) and its video goes on
//!   within 2 s, with RTP timestamps that never go backwards.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use ferry_tests::cluster::{Cluster, start_cluster, wait_registered};
use ferry_tests::{Browser, Collector, Reports, num};
use serde_json::Value;

const SETUP: Duration = Duration::from_secs(45);
/// How soon video must play again after the kill.
const RECOVERY: Duration = Duration::from_secs(2);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// A browser-SDK page through the gateway, its first offer straight to `node` (so the test
/// decides where the sessions start).
fn page(c: &Cluster, collector: &Collector, page: &str, id: &str, node: &str) -> Result<Browser> {
    let kind = if page.contains("publish") {
        "whip"
    } else {
        "whep"
    };
    Browser::open(&collector.page_url(
        page,
        &[
            ("sdk", &c.gateway),
            ("base", &c.gateway),
            ("endpoint", &format!("{node}/{kind}/crash")),
            ("stream", "crash"),
            ("codec", "vp8"),
            ("id", id),
            ("token", &c.token),
        ],
    ))
}

fn live(r: &Value) -> bool {
    r["state"] == "connected" && (r["phase"] == "publishing" || num(r, "/frames/count") > 30.0)
}

/// The first frame page `id` showed after `since` (Unix ms), if any.
fn first_frame_after(r: &Reports, id: &str, since: f64) -> Option<f64> {
    r.get(id)?["frames"]["times"]
        .as_array()?
        .iter()
        .filter_map(Value::as_f64)
        .find(|t| *t > since)
}

/// Waits until page `id` shows a frame after `since`, or gives up at `since` + 15 s.
async fn wait_frame_after(collector: &Collector, id: &str, since: f64) -> Result<(Reports, f64)> {
    let reports = collector
        .wait_until(Duration::from_secs(15), |r| {
            first_frame_after(r, id, since + 300.0).is_some()
        })
        .await?;
    let first = first_frame_after(&reports, id, since).context("a frame after the kill")?;
    Ok((reports, first - since))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_whose_node_dies_plays_on_elsewhere_within_two_seconds() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    let mut c = start_cluster("sdk-viewer-crash")?;
    wait_registered(&c.gateway, 2).await?;
    let collector = Collector::start()?;
    // The publisher on node-b, the viewer on node-a (the stream relayed to it).
    let _a = page(&c, &collector, "sdk-publish.html", "A", &c.node_b.clone())?;
    collector
        .wait_until(SETUP, |r| r.get("A").is_some_and(live))
        .await?;
    let _b = page(&c, &collector, "sdk-play.html", "B", &c.node_a.clone())?;
    let before = collector
        .wait_until(SETUP, |r| r.get("B").is_some_and(live))
        .await?;
    ensure!(
        before["B"]["node"] == "node-a",
        "B plays from {}",
        before["B"]["node"]
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let session = before["B"]["session"].clone();

    let killed = unix_ms();
    c.a.kill();
    let (after, ms) = wait_frame_after(&collector, "B", killed).await?;
    let b = &after["B"];
    eprintln!(
        "viewer: first frame {ms:.0} ms after SIGKILL of its node; now on {}; reconnected {}",
        b["node"], b["reconnected"]
    );
    ensure!(
        ms <= RECOVERY.as_millis() as f64,
        "the viewer played again {ms:.0} ms after its node died (≤ {RECOVERY:?})"
    );
    let after = collector
        .wait_until(Duration::from_secs(5), |r| {
            r.get("B").is_some_and(|b| b["node"] == "node-b")
        })
        .await?;
    let b = &after["B"];
    ensure!(
        b["session"] == session,
        "the same session: {} → {}",
        session,
        b["session"]
    );
    ensure!(
        b["reconnected"]
            .as_array()
            .is_some_and(|r| r.len() == 1 && r[0]["resumed"] == true),
        "one resumed reconnection: {}",
        b["reconnected"]
    );
    ensure!(
        b["errors"].as_array().is_some_and(Vec::is_empty),
        "{}",
        b["errors"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_whose_node_dies_republishes_and_viewers_keep_their_sessions() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    let mut c = start_cluster("sdk-publisher-crash")?;
    wait_registered(&c.gateway, 2).await?;
    let collector = Collector::start()?;
    // The publisher on node-a, the viewer on node-b (relayed from node-a).
    let _a = page(&c, &collector, "sdk-publish.html", "A", &c.node_a.clone())?;
    collector
        .wait_until(SETUP, |r| r.get("A").is_some_and(live))
        .await?;
    let _c = page(&c, &collector, "sdk-play.html", "C", &c.node_b.clone())?;
    let before = collector
        .wait_until(SETUP, |r| r.get("C").is_some_and(live))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (publisher, viewer) = (
        before["A"]["session"].clone(),
        before["C"]["session"].clone(),
    );

    let killed = unix_ms();
    c.a.kill();
    let (after, ms) = wait_frame_after(&collector, "C", killed).await?;
    eprintln!(
        "publisher's node killed: the viewer's first new frame {ms:.0} ms later; publisher now on {} ({}), viewer events {}",
        after["A"]["node"], after["A"]["reconnected"], after["C"]["sdk"]
    );
    ensure!(
        ms <= RECOVERY.as_millis() as f64,
        "the viewer played again {ms:.0} ms after the publisher's node died (≤ {RECOVERY:?})"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end = collector.reports();
    let (a, v) = (&end["A"], &end["C"]);
    ensure!(
        a["node"] == "node-b" && a["session"] == publisher,
        "publisher: {a}"
    );
    ensure!(
        v["session"] == viewer && v["node"] == "node-b",
        "the viewer kept its session on node-b: {}",
        v["session"]
    );
    ensure!(
        v["reconnected"].as_array().is_some_and(Vec::is_empty) && v["totals"]["transports"] == 1,
        "the viewer did not reconnect: {} / {}",
        v["reconnected"],
        v["totals"]
    );
    ensure!(
        num(v, "/frames/tsRegressions") == 0.0,
        "the viewer's RTP timestamps went backwards"
    );
    ensure!(
        num(&end["C"], "/frames/count") > num(&before["C"], "/frames/count") + 60.0,
        "video goes on"
    );
    Ok(())
}
