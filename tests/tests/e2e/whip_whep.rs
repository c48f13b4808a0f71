//! End to end with headless Chromium: page A publishes the fake camera and
//! microphone over WHIP to a real `ferry node`; pages B and C play it over
//! WHEP. For VP8 and for H.264: over 10 s each viewer decodes ≥ 120 frames
//! (three Chromium instances share two cores here, so ≥ 12 fps) without a
//! freeze and receives audio; when A DELETEs, B and C see their session end.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use ferry_tests::cluster::open_publisher;
use ferry_tests::{Browser, Collector, FerryNode, Reports, http, num};
use serde_json::Value;

const SETUP: Duration = Duration::from_secs(40);
const WINDOW: Duration = Duration::from_secs(10);

fn playing(r: &Value) -> bool {
    r["connectionState"] == "connected" && num(r, "/inbound/video/framesDecoded") > 0.0
}

fn show(reports: &Reports, id: &str) -> String {
    reports.get(id).map_or("no report".into(), |r| {
        format!(
            "{id}: conn={} dtls={} video={} audio={}",
            r["connectionState"], r["dtlsState"], r["inbound"]["video"], r["inbound"]["audio"]
        )
    })
}

async fn run(codec: &str, mime: &str) -> Result<()> {
    let node = FerryNode::spawn(&[])?;
    let collector = Collector::start()?;
    let stream = format!("e2e-{codec}");
    let whip = format!("{}/whip/{stream}", node.http);
    let whep = format!("{}/whep/{stream}", node.http);

    let token = node.token.as_str();
    let _a = open_publisher(&collector, &whip, codec, "A", &[("token", token)], SETUP).await?;
    let view = |id| {
        collector.page_url(
            "view.html",
            &[("whep", &whep), ("id", id), ("token", token)],
        )
    };
    let _b = Browser::open(&view("B"))?;
    let _c = Browser::open(&view("C"))?;
    let start = collector
        .wait_until(SETUP, |r| {
            ["B", "C"].iter().all(|id| r.get(*id).is_some_and(playing))
        })
        .await?;
    let t0 = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let end = collector.reports();
    let elapsed = t0.elapsed();
    eprintln!(
        "{codec}: window {elapsed:?}\n  {}\n  {}",
        show(&end, "B"),
        show(&end, "C")
    );

    for id in ["B", "C"] {
        let (s, e) = (&start[id], &end[id]);
        let video = &e["inbound"]["video"];
        ensure!(
            video["codec"] == mime,
            "{id} plays {} not {mime}",
            video["codec"]
        );
        let decoded =
            num(e, "/inbound/video/framesDecoded") - num(s, "/inbound/video/framesDecoded");
        ensure!(
            decoded >= 120.0,
            "{id} decoded {decoded} frames in {elapsed:?} (need ≥ 120): {}",
            show(&end, id)
        );
        // Over the window, as the frames are counted (Chromium's counters start at the page's
        // first frame, while the browsers still start up).
        let froze = |key: &str| num(e, key) - num(s, key);
        ensure!(
            froze("/inbound/video/freezeCount") == 0.0,
            "{id} froze: {}",
            show(&end, id)
        );
        ensure!(
            froze("/inbound/video/totalFreezesDuration") == 0.0,
            "{id} froze: {}",
            show(&end, id)
        );
        ensure!(
            num(e, "/inbound/audio/packetsReceived") > num(s, "/inbound/audio/packetsReceived"),
            "{id} gets no audio: {}",
            show(&end, id)
        );
        eprintln!(
            "{codec} {id}: {decoded} frames in {elapsed:?}, packetsLost video {} audio {}, nack {}",
            video["packetsLost"], e["inbound"]["audio"]["packetsLost"], video["nackCount"]
        );
    }

    // The node lists the three sessions; the publisher ends its session, the viewers see theirs end.
    let sessions = http(&format!("{}/v1/sessions", node.http), "GET", &[], b"")?;
    ensure!(
        sessions.body.matches("\"connected\"").count() == 3,
        "{}",
        sessions.body
    );
    collector.command("A", "delete");
    collector
        .wait_until(Duration::from_secs(15), |r| {
            r.get("A").is_some_and(|a| a["deleted"] == true)
                && ["B", "C"]
                    .iter()
                    .all(|id| r.get(*id).is_some_and(|v| v["sessionEnded"] == true))
        })
        .await?;
    let sessions = http(&format!("{}/v1/sessions", node.http), "GET", &[], b"")?;
    ensure!(
        sessions.body.trim() == "[]",
        "sessions left: {}",
        sessions.body
    );
    ensure!(
        node.metric("sessions_closed")? == 3,
        "three sessions closed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_publishes_and_two_chromium_viewers_play_vp8_then_h264() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    run("vp8", "video/VP8").await?;
    run("h264", "video/H264").await?;
    Ok(())
}
