//! `ferry dev` end to end: the scheduler on the gateway port with node-a and
//! node-b reporting to it; the demo page, driven in headless Chromium like a
//! user would (Publish, then Play), publishes the fake camera through the
//! scheduler's 307 to the placed node and plays it back from the same node —
//! cross-origin, so CORS on the scheduler and the nodes is exercised.

use std::time::Duration;

use anyhow::{Result, ensure};
use ferry_tests::{Browser, Collector, FerryProcess, http, num};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_page_publishes_and_plays_through_the_dev_gateway() -> Result<()> {
    let dev = FerryProcess::spawn(&[
        "dev",
        "--gateway",
        "127.0.0.1:0",
        "--node-a",
        "127.0.0.1:0",
        "--node-b",
        "127.0.0.1:0",
    ])?;
    let gateway = dev.after("gateway")?;
    // Both nodes register with the scheduler.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let nodes = http(&format!("{gateway}/v1/nodes"), "GET", &[], b"")?;
        if nodes.body.matches("\"state\":\"active\"").count() == 2 {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "nodes did not register: {}",
            nodes.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = http(&format!("{gateway}/"), "GET", &[], b"")?;
    ensure!(
        r.status == 200 && r.body.contains("<title>"),
        "demo page served"
    );
    let r = http(
        &format!("{gateway}/whip/x"),
        "POST",
        &[("Content-Type", "application/sdp")],
        b"v=0",
    )?;
    ensure!(r.status == 307, "gateway redirects WHIP: {}", r.status);

    let collector = Collector::start()?;
    let page = format!("{}&server={}&run=1", collector.demo_url("demo"), gateway);
    let _browser = Browser::open(&page)?;
    let reports = collector
        .wait_until(Duration::from_secs(45), |r| {
            r.get("demo").is_some_and(|d| {
                num(d, "/video/frames") > 60.0
                    || d["errors"].as_array().is_some_and(|e| !e.is_empty())
            })
        })
        .await?;
    let d = &reports["demo"];
    eprintln!("demo report: {d}");
    ensure!(
        d["errors"].as_array().is_some_and(|e| e.is_empty()),
        "page errors: {}",
        d["errors"]
    );
    ensure!(num(d, "/video/width") > 0.0, "the Play panel shows video");
    ensure!(
        d["shown"]["freezeCount"] == "0",
        "no freezes shown: {}",
        d["shown"]
    );
    // The scheduler lists both sessions (reported by heartbeat) on one node.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let sessions = http(&format!("{gateway}/v1/sessions"), "GET", &[], b"")?;
        let on_a = sessions.body.matches("\"node\":\"node-a\"").count();
        let on_b = sessions.body.matches("\"node\":\"node-b\"").count();
        if (on_a, on_b) == (2, 0) || (on_a, on_b) == (0, 2) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "sessions: {}",
            sessions.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
