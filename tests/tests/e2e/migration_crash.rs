//! Crashes during migration, with each component its own process
//! (`ferry scheduler`, `ferry edge`, two `ferry node`s sharing one cluster
//! secrets directory) and Chromium publishing and playing through the edge:
//!
//! - the target node stops dead (SIGSTOP, then SIGKILL) while the
//!   publisher's migration runs: the migration does not commit and the
//!   session plays on from the source;
//! - the source node is SIGKILLed right after the publisher and the viewer
//!   moved off it: both play on from the target without a freeze.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use ferry_tests::cluster::{
    Cluster, migration_end, open_publisher, playing, session_of, start_cluster, start_migration,
    wait_registered, wait_session_on,
};
use ferry_tests::{Browser, Collector, LossCounters, Reports, http, num};

const SETUP: Duration = Duration::from_secs(45);

/// One scenario at a time: each runs several Chromium instances and a
/// cluster, and on two cores two of them at once starve each other (the
/// figures would then measure the machine, not Ferry).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The sessions a node lists (JSON text).
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
    let whip = format!("{}/whip/{stream}", c.node_a);
    let a = open_publisher(collector, &whip, "vp8", "A", &[("token", &c.token)], SETUP).await?;
    let b = Browser::open(&collector.page_url(
        "view.html",
        &[
            ("whep", &format!("{}/whep/{stream}", c.node_a)),
            ("id", "B"),
            ("token", &c.token),
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
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    let mut c = start_cluster("crash")?;
    wait_registered(&c.gateway, 2).await?;
    let collector = Collector::start()?;
    let pages = open_pages(&c, &collector).await?;
    let mut start;
    // Stop the target dead once it holds the imported (not yet active)
    // session: the snapshot arrived, the cutover may be under way. A whole
    // migration now takes a few milliseconds, so the stop can land after
    // the commit: then the target is let go, the session brought back and
    // the attempt repeated. Once the source has rolled back, SIGKILL.
    let mut attempts = 0;
    let v = loop {
        attempts += 1;
        ensure!(attempts <= 10, "the stop never landed before the commit");
        // Figures cover the last attempt only (an owner stopped after a
        // commit froze its viewers on purpose).
        start = collector.reports();
        let id = start_migration(&c.gateway, &c.token, &pages.publisher, "node-b", "edge")?;
        let deadline = Instant::now() + Duration::from_secs(3);
        while !sessions_on(&c.node_b)?.contains(&pages.publisher) {
            ensure!(
                Instant::now() < deadline,
                "the target never imported the session"
            );
        }
        c.b.pause()?;
        let t = Instant::now();
        // Longer than the source's longest wait for Ready (500 ms).
        tokio::time::sleep(Duration::from_millis(700)).await;
        let r = http(
            &format!("{}/v1/migrations/{id}", c.gateway),
            "GET",
            &[],
            b"",
        )?;
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
        if v["state"] == "rolled_back" {
            eprintln!(
                "migration with the target stopped (attempt {attempts}): {v} ({:?})",
                t.elapsed()
            );
            break v;
        }
        // Committed (or committing): the stop came too late.
        c.b.resume()?;
        let v = migration_end(&c.gateway, &id).await?;
        ensure!(v["state"] == "committed", "{v}");
        eprintln!("attempt {attempts}: committed before the stop; moving back");
        wait_session_on(&c.gateway, &pages.publisher, "node-b").await?;
        let back = start_migration(&c.gateway, &c.token, &pages.publisher, "node-a", "edge")?;
        let v = migration_end(&c.gateway, &back).await?;
        ensure!(v["state"] == "committed", "{v}");
        wait_session_on(&c.gateway, &pages.publisher, "node-a").await?;
    };
    c.b.kill();
    ensure!(
        v["error"].as_str().is_some_and(|e| e.contains("Ready")),
        "rolled back for another reason: {v}"
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
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    let mut c = start_cluster("crash")?;
    wait_registered(&c.gateway, 2).await?;
    let collector = Collector::start()?;
    let pages = open_pages(&c, &collector).await?;
    let bases = [
        ("edge", c.edge_http.as_str()),
        ("node-a", c.node_a.as_str()),
        ("node-b", c.node_b.as_str()),
    ];
    let counters = LossCounters::read(&bases);
    let start = collector.reports();
    for session in [&pages.publisher, &pages.viewer] {
        let id = start_migration(&c.gateway, &c.token, session, "node-b", "edge")?;
        let v = migration_end(&c.gateway, &id).await?;
        ensure!(v["state"] == "committed", "{v}");
        if session != &pages.publisher {
            continue;
        }
        // Whether a loss came with the publisher's move (the page reports every second).
        tokio::time::sleep(Duration::from_millis(1200)).await;
        eprintln!(
            "B after moving {session}: packetsLost +{}",
            delta(
                &start,
                &collector.reports(),
                "B",
                "/inbound/video/packetsLost"
            )
        );
    }
    let moved = LossCounters::read(&bases);
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
        "B froze or lost packets: {}\nloss counters that grew during the migrations:\n{}\nafter node-a's kill:\n{}",
        end["B"]["inbound"]["video"],
        moved.since(&counters),
        LossCounters::read(&bases).since(&moved)
    );
    Ok(())
}
