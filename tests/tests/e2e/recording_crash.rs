//! A recording outlives its node (issue 13, scope 2), with each component its own process
//! (`ferry scheduler`, `ferry edge`, two `ferry node`s sharing one cluster directory, so one
//! recordings directory) and Chromium publishing to node-a.
//!
//! The operator records the stream on node-b (`POST /v1/recordings {"node": "node-b"}`: relayed
//! there); node-b is SIGKILLed mid-recording; the scheduler sees it down and resumes the
//! recording on node-a from the state node-b stored last. The playlist goes on with the same
//! segment numbering, marks the lost media with exactly one `EXT-X-DISCONTINUITY`, and opens in
//! ffprobe with audio and video and strictly increasing pts.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ferry_testkit::{probe, require_ffprobe};
use ferry_tests::cluster::{
    open_publisher, post_once_known, recording_until, start_cluster, wait_registered,
};
use ferry_tests::{Collector, api_call};
use serde_json::{Value, json};

const SETUP: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_resumes_on_another_node_when_its_node_is_killed() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    require_ffprobe()?;
    let mut c = start_cluster("rec-crash")?;
    wait_registered(&c.gateway, 2).await?;
    let collector = Collector::start()?;
    let stream = "rec-crash";
    let whip = format!("{}/whip/{stream}", c.node_a);
    let _page =
        open_publisher(&collector, &whip, "vp8", "A", &[("token", &c.token)], SETUP).await?;
    let (status, v) = post_once_known(
        &c.gateway,
        &c.token,
        "/v1/recordings",
        &json!({ "stream": stream, "node": "node-b" }),
    )
    .await?;
    ensure!(status == 201, "POST /v1/recordings: {status} {v}");
    ensure!(v["node"] == "node-b", "recorded where asked: {v}");
    let id = v["id"].as_str().context("no id")?.to_owned();
    let dir = v["target"].as_str().context("no target")?.to_owned();
    ensure!(
        Path::new(&dir).starts_with(&c.dir),
        "the default target {dir} is in the shared cluster directory"
    );
    // Long enough for segments and their state to be stored (keyframes every 4 s).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before = std::fs::read_to_string(format!("{dir}/index.m3u8")).context("playlist")?;
    let stored = before.matches(".mkv").count().saturating_sub(1);
    ensure!(
        stored >= 1,
        "node-b stored segments before it died:\n{before}"
    );

    c.b.kill();
    let killed = Instant::now();
    let v = recording_until(&c.gateway, &id, Duration::from_secs(30), |v| {
        v["node"] == "node-a" && v["state"] == "recording" && v["resumes"] == 1
    })
    .await?;
    eprintln!(
        "resumed on node-a {:?} after node-b was killed ({stored} segments stored before): {v}",
        killed.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (status, v) = api_call(
        &c.gateway,
        &c.token,
        "DELETE",
        &format!("/v1/recordings/{id}"),
        &Value::Null,
    )?;
    ensure!(
        status == 200 && v["state"] == "stopped",
        "DELETE: {status} {v}"
    );

    let playlist = format!("{dir}/index.m3u8");
    let text = std::fs::read_to_string(&playlist).with_context(|| playlist.clone())?;
    ensure!(text.contains("#EXT-X-ENDLIST"), "closed:\n{text}");
    ensure!(
        text.matches("#EXT-X-DISCONTINUITY\n").count() == 1,
        "the lost media is marked once:\n{text}"
    );
    let names: Vec<&str> = text.lines().filter(|l| l.starts_with("seg-")).collect();
    for (i, name) in names.iter().enumerate() {
        ensure!(
            *name == format!("seg-{:05}.mkv", i + 1),
            "segments numbered without a hole: {names:?}"
        );
        ensure!(Path::new(&dir).join(name).exists(), "{name} is stored");
    }
    let p = probe(Path::new(&playlist))?;
    let duration = p.duration.context("no duration")?;
    eprintln!(
        "{} segments, ffprobe duration {duration:.3} s, streams {:?}",
        names.len(),
        p.streams
    );
    ensure!(p.has("video") && p.has("audio"), "streams {:?}", p.streams);
    ensure!(
        names.len() > stored + 1 && duration > 10.0,
        "the recording went on after the crash: {} segments, {duration} s",
        names.len()
    );
    Ok(())
}
