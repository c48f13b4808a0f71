//! Hot streams across nodes (issue 10, scope 4): with `--hot-stream-viewers 1`, the first viewer
//! of a stream plays on its publisher's node and the next go to the other node of `ferry dev`,
//! which relays the stream from the origin (the cascade relay); all decode, and
//! `GET /v1/streams` shows the stream hot with its viewers per node. With Rust SDK viewers one
//! at a time, and with three Chromium viewers opened at once (the scheduler counts the viewers
//! it placed since a node's last heartbeat, so a burst spills too).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_sdk::codec::Codec;
use ferry_sdk::{FerryClient, PlayOptions, PublishOptions};
use ferry_tests::cluster::{open_sdk_page, open_sdk_publisher, start_dev_registered};
use ferry_tests::sdk::{frames_over, synthetic};
use ferry_tests::{Collector, http, num};
use serde_json::Value;

/// `GET /v1/streams`' entry for `stream` once `ok` holds for it (heartbeats report sessions
/// every second).
async fn stream_view(gateway: &str, stream: &str, ok: impl Fn(&Value) -> bool) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = http(&format!("{gateway}/v1/streams"), "GET", &[], b"")?;
        ensure!(r.status == 200, "{} {}", r.status, r.body);
        let list: Value = serde_json::from_str(&r.body)?;
        let v = list
            .as_array()
            .and_then(|a| a.iter().find(|s| s["stream"] == stream))
            .cloned()
            .unwrap_or_default();
        if ok(&v) {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("GET /v1/streams: {list}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_of_a_hot_stream_spill_to_the_other_node_and_play_relayed() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev_registered(&["--hot-stream-viewers", "1"], &[]).await?;
    let client = FerryClient::new(&dev.gateway).with_token(&dev.token);
    let mut p = PublishOptions::new(Codec::Vp8, false);
    p.media = synthetic();
    let publisher = client.publish("hot", p).await.context("publish")?;
    let origin = publisher.node().context("the publisher's node")?;
    stream_view(&dev.gateway, "hot", |v| v["origin"] == origin.as_str()).await?;

    let view = PlayOptions {
        media: synthetic(),
        ..PlayOptions::default()
    };
    let first = client.play("hot", view.clone()).await.context("viewer 1")?;
    ensure!(
        first.node().as_deref() == Some(origin.as_str()),
        "the first viewer is on {:?}, not the origin {origin}",
        first.node()
    );
    let v = stream_view(&dev.gateway, "hot", |v| v["viewers"] == 1).await?;
    ensure!(v["hot"] == true, "at the limit the stream is hot: {v}");

    let second = client.play("hot", view).await.context("viewer 2")?;
    let spilled = second.node().context("viewer 2's node")?;
    ensure!(
        spilled != origin,
        "the second viewer is on the origin {origin} too"
    );
    let f1 = frames_over(&first, 30, Duration::from_secs(10)).await?;
    let f2 = frames_over(&second, 30, Duration::from_secs(10)).await?;
    // The heartbeats show the relay: the spilled node gets the stream from the origin.
    let v = stream_view(&dev.gateway, "hot", |v| {
        v["viewers"] == 2 && v["relayed_from"][spilled.as_str()] == origin.as_str()
    })
    .await?;
    ensure!(
        v["viewers_by_node"][origin.as_str()] == 1 && v["viewers_by_node"][spilled.as_str()] == 1,
        "{v}"
    );
    let metrics = http(&format!("{}/metrics", dev.gateway), "GET", &[], b"")?.body;
    ensure!(
        metrics.contains("ferry_scheduler_hot_streams 1"),
        "no hot stream in the metrics"
    );
    println!(
        "hot stream: origin {origin}, viewer 1 there ({f1} frames), viewer 2 on {spilled} relayed ({f2} frames)"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_viewers_of_a_hot_stream_opened_at_once_play_on_both_nodes() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev_registered(&["--hot-stream-viewers", "1"], &[]).await?;
    let collector = Collector::start()?;
    let stream = "hot-chromium";
    let _a = open_sdk_publisher(&collector, &dev, stream, "A", &[], Duration::from_secs(45))
        .await
        .context("the publisher did not connect")?;
    let v = stream_view(&dev.gateway, stream, |v| v["origin"].is_string()).await?;
    let origin = v["origin"].as_str().context("origin")?.to_owned();
    let viewers = ["B", "C", "D"];
    let _pages = viewers
        .iter()
        .map(|id| open_sdk_page(&collector, &dev, "sdk-play.html", stream, id, &[]))
        .collect::<Result<Vec<_>>>()?;
    let reports = collector
        .wait_until(Duration::from_secs(60), |r| {
            viewers
                .iter()
                .all(|id| r.get(*id).is_some_and(|b| num(b, "/frames/count") > 30.0))
        })
        .await
        .context("the viewers did not all play")?;
    let v = stream_view(&dev.gateway, stream, |v| v["viewers"] == 3).await?;
    let on_origin = v["viewers_by_node"][origin.as_str()].as_u64().unwrap_or(0);
    ensure!(v["hot"] == true, "{v}");
    ensure!(
        on_origin == 1,
        "the origin {origin} serves {on_origin} viewers, its share is 1: {v}"
    );
    for id in viewers {
        let r = &reports[id];
        ensure!(
            r["sdkErrors"].as_array().is_some_and(Vec::is_empty),
            "{id}: {}",
            r["sdkErrors"]
        );
    }
    println!(
        "hot stream in Chromium: origin {origin} serves 1, the other node {}; frames {:?}",
        v["viewers_by_node"],
        viewers.map(|id| num(&reports[id], "/frames/count"))
    );
    Ok(())
}
